// libFuzzer target: node files of any content parse or fail cleanly.
#include <cstdint>
#include <string_view>

#include "config/node_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)ferry::ParseNodeConfig(text, "fuzz", "/tmp", {});
  return 0;
}
