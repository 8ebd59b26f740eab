// libFuzzer target: the KServe v2 infer body parser (frontend/kserve_codec.h) on arbitrary
// bytes. The first byte picks where the JSON header ends (Inference-Header-Content-Length);
// the rest is the binary section. An accepted request's tensors must lie inside what was
// given and match their shapes, which the target checks by touching every byte.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "frontend/kserve_codec.h"
#include "tests/fuzz/accepted_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t split = all.size() * data[0] / 255;
  ferry::Result<ferry::frontend::ParsedInfer> parsed =
      ferry::frontend::ParseInferRequest(all.substr(0, split), all.substr(split));
  if (!parsed.ok()) {
    return 0;
  }
  CheckAcceptedTensors(*parsed);
  return 0;
}
