#include "shm/recovery.h"

namespace ferry::shm {

uint32_t ResetSlot(const Segment& segment, uint32_t slot) {
  SlotData& data = segment.slot(slot);
  uint32_t generation = data.generation.fetch_add(1, std::memory_order_acq_rel) + 1;
  data.bytes_in_use.store(0, std::memory_order_relaxed);
  data.blocks_in_use.store(0, std::memory_order_relaxed);
  for (uint32_t r = 0; r < segment.num_rings(); ++r) {
    RingData& ring = segment.ring(r);
    if (ring.consumer_slot == slot) {
      ring.head.store(ring.tail.load(std::memory_order_acquire), std::memory_order_release);
    }
  }
  segment.doorbell(slot).sleeping.store(0, std::memory_order_relaxed);
  return generation;
}

}  // namespace ferry::shm
