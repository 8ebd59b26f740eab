#include "shm/recovery.h"

#include <climits>

#include "shm/futex.h"
#include "shm/status.h"

namespace ferry::shm {

uint32_t ResetSlot(const Segment& segment, uint32_t slot) {
  // Discard before bumping: a producer that already saw the new generation pushes after the
  // discard, so nothing addressed to the successor is ever thrown away. Descriptors pushed
  // between the two steps were addressed to the dead incarnation; the successor may see them
  // and its peers resolve them by generation (failed, then released), so none is lost.
  for (uint32_t r = 0; r < segment.num_rings(); ++r) {
    if (segment.RingConsumerSlot(r) == slot) {
      RingHeadData& head = segment.ring_head(r);
      head.head.store(segment.ring_tail(r).tail.load(std::memory_order_acquire),
                      std::memory_order_release);
      head.invalid_descriptors.store(0, std::memory_order_relaxed);
      uint32_t producer = segment.RingProducerSlot(r);
      if (producer != kSupervisor) {  // Its successor consumer starts caught up.
        head.synced_generation.store(segment.generation(producer).load(std::memory_order_acquire),
                                     std::memory_order_release);
      }
    }
    if (segment.RingProducerSlot(r) == slot) {
      // The live consumer rewinds to this point when it sees the new generation.
      uint64_t head = segment.ring_head(r).head.load(std::memory_order_acquire);
      segment.ring_reset_tail(r).store(head, std::memory_order_relaxed);
      segment.ring_tail(r).tail.store(head, std::memory_order_release);
    }
  }
  AccountingData& accounting = segment.accounting(slot);
  accounting.bytes_in_use.store(0, std::memory_order_relaxed);
  accounting.blocks_in_use.store(0, std::memory_order_relaxed);
  if (accounting.high_water.load(std::memory_order_relaxed) > segment.partition_bytes()) {
    accounting.high_water.store(segment.partition_bytes(), std::memory_order_relaxed);
  }
  // The dead process may have died mid-write of its status (sequence left odd) or written
  // garbage: the supervisor writes a settled "stopped" snapshot in its place.
  StatusSnapshotData stopped{};
  stopped.state = static_cast<uint32_t>(ProcessState::kStopped);
  StatusWriter(segment, slot).Publish(stopped);
  BellData& bell = segment.bell(slot);
  bell.sleeping.store(kAwake, std::memory_order_relaxed);
  uint32_t generation = segment.generation(slot).fetch_add(1, std::memory_order_acq_rel) + 1;
  // The bump wakes a sleeper that read the word before it and is about to wait on it; the
  // futex wake one already waiting. (The supervisor never sleeps in WaitForWork: its word,
  // the bell's last, is left alone.)
  for (uint32_t target = 0; target < segment.num_slots(); ++target) {
    bell.wake[target].fetch_add(1, std::memory_order_release);
    FutexWake(&bell.wake[target], INT_MAX);
  }
  return generation;
}

}  // namespace ferry::shm
