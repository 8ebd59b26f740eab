// Supervisor-side crash recovery for one process slot, and the generation checks peers use.
//
// Call ResetSlot after the slot's process is known dead (waitpid / pidfd), before starting its
// successor, with the supervisor's view (every object writable). The dead process may have
// written anything into its own object before dying (a hostile plugin, a wild pointer), so
// ResetSlot re-initialises all of it; nothing it reads from there is trusted:
//   1. the rings it consumed: head := the live producer's tail (their waiting descriptors
//      were addressed to the dead incarnation); the consumer is dead, so the supervisor is
//      head's only writer;
//   2. the rings it produced: tail := the live consumer's published head, recorded as the
//      ring's reset point (what it left unread came from the dead incarnation, which its
//      peers resolve by generation). The live consumer rewinds to the reset point when it
//      sees the new generation (RingConsumer::TryPop), so a pop in flight across this step, or
//      descriptors it had cached, never leave it ahead of the successor;
//   3. its arena accounting: in-use counters zeroed (its successor starts with an empty
//      arena), the high water clamped to the partition; failed allocations stay cumulative;
//   4. its status: a settled "stopped" snapshot in place of one it may have died writing;
//   5. its bell: sleeping cleared;
//   6. its generation is bumped, so requests the dead incarnation submitted and completions
//      addressed to it are recognised (by their request id) and dropped;
//   7. every wake-up word it owned for a slot is bumped and woken: a peer asleep waiting for
//      it (for space in a ring it consumed, say) re-checks now, not at its timeout.
//
// Thread safety: call from the supervisor's one thread. Process safety: see above; live peers
// carry on throughout.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/segment.h"

namespace ferry::shm {

// Returns the slot's new generation. REQUIRES: segment.owner() == kSupervisor (or a view
// where every object is writable) and the slot's process is dead.
uint32_t ResetSlot(const Segment& segment, uint32_t slot);

// True when `generation` is the slot's current one. Before reading a peer's bytes.
inline bool IsCurrent(const Segment& segment, uint32_t slot, uint32_t generation) {
  return segment.generation(slot).load(std::memory_order_acquire) == generation;
}

// After reading a peer's bytes (a tensor in its arena): true when the incarnation read is
// still current, so the bytes were not written by a successor. The seqlock read pattern:
// IsCurrent (acquire) -> read the bytes -> StillCurrent. The acquire fence keeps the bytes'
// loads from moving after the generation's second load on weakly ordered CPUs (Arm: a dmb
// ishld), so a byte written by a successor implies the bump is seen here: the successor
// writes only after its own acquire load of the bumped generation (Segment::Attach, arena
// setup), and ResetSlot bumps before the successor starts.
inline bool StillCurrent(const Segment& segment, uint32_t slot, uint32_t generation) {
  std::atomic_thread_fence(std::memory_order_acquire);
  return segment.generation(slot).load(std::memory_order_relaxed) == generation;
}

}  // namespace ferry::shm
