// ferryctl's side of ferryd's control socket (control/control_protocol.h): one request,
// one reply, within a timeout.
//
// Thread safety: pure function (a connection per call).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"
#include "control/control_protocol.h"

namespace ferry::control {

// The reply's result, or its error. UNAVAILABLE naming the socket when ferryd is not running
// (no socket, or nobody listening), refused access, or no reply within `timeout_ms`.
Result<nlohmann::json> CallFerryd(const std::string& socket_path,
                                  const control::ControlRequest& request, int timeout_ms = 10'000);

}  // namespace ferry::control
