#include "shm/ring.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "shm/futex.h"

namespace ferry::shm {
namespace {

size_t UsedBytes(uint16_t num_tensors) {
  return offsetof(DescriptorData, tensors) +
         std::min<uint32_t>(num_tensors, kMaxTensors) * sizeof(TensorRefData);
}

// After publishing: wakes the consumer if it announced that it sleeps.
void Wake(DoorbellData* doorbell) {
  // Pairs with the consumer's fence between announcing sleep and re-checking its work.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (doorbell->sleeping.load(std::memory_order_relaxed) != 0) {
    doorbell->word.fetch_add(1, std::memory_order_release);
    FutexWake(&doorbell->word, 1);
  }
}

}  // namespace

RingProducer::RingProducer(const Segment& segment, uint32_t ring)
    : ring_(&segment.ring(ring)),
      slots_(segment.descriptors(ring)),
      doorbell_(&segment.doorbell(segment.RingConsumerSlot(ring))),
      index_(ring),
      mask_(segment.ring_capacity() - 1),
      tail_(segment.ring(ring).tail.load(std::memory_order_relaxed)) {}

RingStatus RingProducer::TryPush(const DescriptorData& descriptor) {
  uint64_t head = ring_->head.load(std::memory_order_acquire);
  if (head > tail_) {
    return RingStatus::kCorrupt;
  }
  if (tail_ - head > mask_) {
    return tail_ - head == mask_ + 1 ? RingStatus::kFull : RingStatus::kCorrupt;
  }
  std::memcpy(&slots_[tail_ & mask_], &descriptor, UsedBytes(descriptor.num_tensors));
  ++tail_;
  ring_->tail.store(tail_, std::memory_order_release);
  Wake(doorbell_);
  return RingStatus::kOk;
}

void RingDoorbell(const Segment& segment, uint32_t consumer_slot) {
  Wake(&segment.doorbell(consumer_slot));
}

RingConsumer::RingConsumer(const Segment& segment, uint32_t ring)
    : ring_(&segment.ring(ring)),
      slots_(segment.descriptors(ring)),
      index_(ring),
      capacity_(segment.ring_capacity()),
      mask_(segment.ring_capacity() - 1),
      head_(segment.ring(ring).head.load(std::memory_order_relaxed)) {}

bool RingConsumer::HasWork() const {
  // An impossible tail (behind head, or beyond the capacity) is not work: the consumer must
  // not spin on a ring a hostile producer wedged.
  uint64_t waiting = ring_->tail.load(std::memory_order_acquire) - head_;
  return waiting != 0 && waiting <= capacity_;
}

void RingConsumer::CountInvalid() {
  ring_->invalid_descriptors.fetch_add(1, std::memory_order_relaxed);
}

RingStatus RingConsumer::TryPop(DescriptorData* out) {
  uint64_t tail = ring_->tail.load(std::memory_order_acquire);  // Read once.
  if (tail == head_) {
    return RingStatus::kEmpty;
  }
  if (tail < head_ || tail - head_ > capacity_) {
    CountInvalid();
    return RingStatus::kCorrupt;
  }
  // The header first; then only the tensors it declares (clamped, so a hostile count
  // cannot make the copy run past the slot). Fewer cache lines cross between cores.
  const DescriptorData& slot = slots_[head_ & mask_];
  std::memcpy(out, &slot, offsetof(DescriptorData, tensors));
  uint32_t used = std::min<uint32_t>(out->num_tensors, kMaxTensors);
  std::memcpy(out->tensors, slot.tensors, used * sizeof(TensorRefData));
  // Nothing of an earlier descriptor may survive in the caller's copy.
  std::memset(out->tensors + used, 0, (kMaxTensors - used) * sizeof(TensorRefData));
  ++head_;
  ring_->head.store(head_, std::memory_order_release);
  return RingStatus::kOk;
}

bool WaitForWork(const Segment& segment, uint32_t consumer_slot, const std::function<bool()>& ready,
                 int64_t timeout_ns, int spin_iterations) {
  for (int i = 0; i < spin_iterations; ++i) {
    if (ready()) {
      return true;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  DoorbellData& bell = segment.doorbell(consumer_slot);
  uint32_t word = bell.word.load(std::memory_order_acquire);
  bell.sleeping.store(1, std::memory_order_relaxed);
  // Pairs with the producer's fence between publishing tail and reading `sleeping`.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ready()) {
    bell.sleeping.store(0, std::memory_order_relaxed);
    return true;
  }
  FutexWait(&bell.word, word, timeout_ns);
  bell.sleeping.store(0, std::memory_order_relaxed);
  return ready();
}

}  // namespace ferry::shm
