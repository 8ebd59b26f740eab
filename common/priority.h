// A request's priority: its level within its model's queue. One type from the KServe
// "priority" parameter to the worker's queue: the hook host's InferRequest, the descriptor on
// the ring (shm/layout.h) and the scheduler's QueuedRequest all carry a Priority.
//
// Thread safety: constants and a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace ferry {

// Levels: requests of a more urgent level (smaller number) are dispatched first, each level in
// arrival order. Levels never change which model runs next.
using Priority = uint8_t;
inline constexpr Priority kHighestPriority = 1;
inline constexpr Priority kDefaultPriority = 2;
inline constexpr Priority kLowestPriority = 3;

// The "priority" parameter as clients send it: 0 (or absent) for the default level, else the
// level itself. INVALID_ARGUMENT outside 0..kLowestPriority. The one check of a client's
// priority: every codec (JSON, binary, gRPC) decodes the parameter with it.
inline Result<Priority> PriorityFromParameter(int64_t value) {
  if (value < 0 || value > kLowestPriority) {
    return InvalidArgument("parameter \"priority\" is " + std::to_string(value) +
                           ": 0 (the default level) or 1 (most urgent) to " +
                           std::to_string(kLowestPriority));
  }
  return value == 0 ? kDefaultPriority : static_cast<Priority>(value);
}

}  // namespace ferry
