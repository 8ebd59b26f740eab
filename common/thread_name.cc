#include "common/thread_name.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>

namespace ferry {

void NameThisThread(std::string_view name) {
  char buffer[kMaxThreadNameBytes + 1] = {};
  std::memcpy(buffer, name.data(), std::min(name.size(), kMaxThreadNameBytes));
  (void)prctl(PR_SET_NAME, buffer, 0, 0, 0);
}

std::string ThisThreadName() {
  char buffer[kMaxThreadNameBytes + 1] = {};  // PR_GET_NAME writes at most 16 bytes.
  if (prctl(PR_GET_NAME, buffer, 0, 0, 0) != 0) {
    return {};
  }
  return std::string(buffer, strnlen(buffer, sizeof(buffer)));
}

}  // namespace ferry
