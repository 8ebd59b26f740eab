// Reading a file the node file names (API keys, TLS certificates and keys) as hostile
// input: a FIFO, a device or a directory is refused without blocking (O_NONBLOCK, then
// S_ISREG), a symbolic link is not followed, the size is bounded (a file growing while read
// included), and a secret must be readable by its owner alone.
//
// Thread safety: a pure function of the file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ferry {

// The whole file. `what` names it in errors ("keys file", "tls_key"). `secret`: group or
// others may not read or write it (mode 0600 or stricter). INVALID_ARGUMENT naming the file
// and the reason.
Result<std::string> ReadConfigFile(const std::string& path, std::string_view what, size_t max_bytes,
                                   bool secret);

}  // namespace ferry
