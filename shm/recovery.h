// Supervisor-side crash recovery for one process slot.
//
// Call after the slot's process is known dead (waitpid / pidfd), before starting its
// successor. ResetSlot:
//   1. discards the descriptors waiting in every ring the dead process consumed
//      (head := tail; the consumer is dead, so the supervisor is head's only writer) and
//      clears its doorbell's sleeping flag, and publishes a settled "stopped" status;
//   2. zeroes its partition's in-use accounting (its successor starts with an empty arena;
//      high water and failed allocations stay cumulative);
//   3. bumps the slot's generation, so requests the dead incarnation submitted and
//      completions addressed to it are recognised (by their request id) and dropped.
// Rings the dead process produced into are left to their live consumers, which drop its
// descriptors by generation; its successor continues from the published tail.
//
// Thread safety: call from the supervisor's one thread. Process safety: see above; live peers
// carry on throughout.
#pragma once

#include <cstdint>

#include "shm/segment.h"

namespace ferry::shm {

// Returns the slot's new generation.
uint32_t ResetSlot(const Segment& segment, uint32_t slot);

// True when `generation` is the slot's current one.
inline bool IsCurrent(const Segment& segment, uint32_t slot, uint32_t generation) {
  return segment.slot(slot).generation.load(std::memory_order_acquire) == generation;
}

}  // namespace ferry::shm
