#include "shm/recovery.h"

#include "shm/status.h"

namespace ferry::shm {

uint32_t ResetSlot(const Segment& segment, uint32_t slot) {
  // Discard before bumping: a producer that already saw the new generation pushes after the
  // discard, so nothing addressed to the successor is ever thrown away. Descriptors pushed
  // between the two steps were addressed to the dead incarnation; the successor may see them
  // and its peers resolve them by generation (failed, then released), so none is lost.
  for (uint32_t r = 0; r < segment.num_rings(); ++r) {
    if (segment.RingConsumerSlot(r) == slot) {
      RingData& ring = segment.ring(r);
      ring.head.store(ring.tail.load(std::memory_order_acquire), std::memory_order_release);
    }
  }
  segment.doorbell(slot).sleeping.store(0, std::memory_order_relaxed);
  // The dead process may have died mid-write of its status (sequence left odd): the
  // supervisor writes a settled "stopped" snapshot in its place.
  StatusSnapshotData stopped{};
  stopped.state = static_cast<uint32_t>(ProcessState::kStopped);
  StatusWriter(segment, slot).Publish(stopped);
  SlotData& data = segment.slot(slot);
  data.bytes_in_use.store(0, std::memory_order_relaxed);
  data.blocks_in_use.store(0, std::memory_order_relaxed);
  return data.generation.fetch_add(1, std::memory_order_acq_rel) + 1;
}

}  // namespace ferry::shm
