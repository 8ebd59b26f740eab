#include "shm/ring.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "shm/futex.h"

namespace ferry::shm {
namespace {

size_t UsedBytes(uint16_t num_tensors) {
  return offsetof(DescriptorData, tensors) +
         std::min<uint32_t>(num_tensors, kMaxTensors) * sizeof(TensorRefData);
}

thread_local WaitHooks* wait_hooks = nullptr;

uint32_t BellIndex(uint32_t slot) { return slot == kSupervisor ? kMaxSlots : slot; }

// The words that may wake `slot`: its own (its other threads), the supervisor's (control
// rings, recovery) and, with kEveryPeer, those of every slot of the other kind (its rings'
// other ends).
void WakeSources(const Segment& segment, uint32_t slot, WakeOn wake_on,
                 std::vector<uint32_t>* out) {
  out->clear();
  out->push_back(slot);
  out->push_back(kSupervisor);
  if (wake_on == WakeOn::kOwnAndSupervisor) {
    return;
  }
  bool worker = segment.IsWorkerSlot(slot);
  for (uint32_t s = 0; s < segment.num_slots(); ++s) {
    if (segment.IsWorkerSlot(s) != worker) {
      out->push_back(s);
    }
  }
}

}  // namespace

Waker::Waker(const Segment& segment, uint32_t from, uint32_t to)
    : target_(&segment.bell(to)),
      word_(&segment.bell(from).wake[BellIndex(to)]),
      peer_(from != to && from != kSupervisor) {}

void Waker::Notify() const {
  // Pairs with the sleeper's fence between announcing sleep and re-checking its condition.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t sleeping = target_->sleeping.load(std::memory_order_relaxed);
  if (sleeping == kAwake || (peer_ && sleeping == kSleepsOnOwn)) {
    return;
  }
  word_->fetch_add(1, std::memory_order_release);
  FutexWake(word_, INT_MAX);
}

RingProducer::RingProducer(const Segment& segment, uint32_t ring)
    : head_(&segment.ring_head(ring)),
      tail_data_(&segment.ring_tail(ring)),
      slots_(segment.descriptors(ring)),
      consumer_(segment, segment.RingProducerSlot(ring), segment.RingConsumerSlot(ring)),
      index_(ring),
      mask_(segment.ring_capacity() - 1),
      tail_(tail_data_->tail.load(std::memory_order_relaxed)),
      cached_head_(head_->head.load(std::memory_order_acquire)) {
  uint32_t producer = segment.RingProducerSlot(ring);
  if (producer != kSupervisor) {
    own_generation_ = segment.generation(producer).load(std::memory_order_acquire);
    synced_ = Synced();
  }
}

bool RingProducer::Synced() const {
  return head_->synced_generation.load(std::memory_order_acquire) == own_generation_;
}

namespace {

RingStatus SpaceFor(uint64_t tail, uint64_t head, uint64_t mask) {
  if (head > tail || tail - head > mask + 1) {
    // A head ahead of tail: a hostile consumer, or one that popped across this slot's reset
    // and has not rewound yet (RingConsumer does on its next pop, and wakes this producer).
    return RingStatus::kCorrupt;
  }
  return tail - head == mask + 1 ? RingStatus::kFull : RingStatus::kOk;
}

}  // namespace

bool RingProducer::HasSpace() const {
  if (!synced_ && !Synced()) {
    return false;
  }
  return SpaceFor(tail_, head_->head.load(std::memory_order_acquire), mask_) == RingStatus::kOk;
}

uint64_t RingProducer::Space() const {
  if (!synced_ && !Synced()) {
    return 0;
  }
  uint64_t head = head_->head.load(std::memory_order_acquire);
  if (SpaceFor(tail_, head, mask_) != RingStatus::kOk) {
    return 0;
  }
  return mask_ + 1 - (tail_ - head);
}

RingStatus RingProducer::TryPush(const DescriptorData& descriptor) {
  if (!synced_) {
    // Restarted after a reset: wait until the consumer has rewound to the reset point (it
    // wakes this producer when it has), then start from its head.
    if (!Synced()) {
      return RingStatus::kFull;
    }
    synced_ = true;
    cached_head_ = head_->head.load(std::memory_order_acquire);
  }
  // The consumer's head is read only when the cached one says there is no room: one cache
  // line less to pull across cores per push (a stale copy can only understate the space).
  if (SpaceFor(tail_, cached_head_, mask_) != RingStatus::kOk) {
    cached_head_ = head_->head.load(std::memory_order_acquire);
    if (RingStatus space = SpaceFor(tail_, cached_head_, mask_); space != RingStatus::kOk) {
      return space;
    }
  }
  std::memcpy(&slots_[tail_ & mask_], &descriptor, UsedBytes(descriptor.num_tensors));
  ++tail_;
  tail_data_->tail.store(tail_, std::memory_order_release);
  consumer_.Notify();
  return RingStatus::kOk;
}

void RingDoorbell(const Segment& segment, uint32_t slot) { Waker(segment, slot, slot).Notify(); }

RingConsumer::RingConsumer(const Segment& segment, uint32_t ring)
    : head_data_(&segment.ring_head(ring)),
      tail_(&segment.ring_tail(ring)),
      slots_(segment.descriptors(ring)),
      producer_(segment, segment.RingConsumerSlot(ring), segment.RingProducerSlot(ring)),
      index_(ring),
      capacity_(segment.ring_capacity()),
      mask_(segment.ring_capacity() - 1),
      head_(head_data_->head.load(std::memory_order_relaxed)),
      cached_tail_(head_) {
  uint32_t producer = segment.RingProducerSlot(ring);
  if (producer != kSupervisor) {
    producer_generation_ = &segment.generation(producer);
    reset_tail_ = &segment.ring_reset_tail(ring);
    seen_generation_ = producer_generation_->load(std::memory_order_acquire);
    if (head_data_->synced_generation.load(std::memory_order_relaxed) != seen_generation_) {
      ProducerReset(true);  // Constructed after a reset it has not caught up with.
    }
  }
}

bool RingConsumer::ProducerReset(bool force) {
  if (producer_generation_ == nullptr) {
    return false;  // The supervisor's control rings: it never restarts under its children.
  }
  uint32_t generation = producer_generation_->load(std::memory_order_acquire);
  if (generation == seen_generation_ && !force) {
    return false;
  }
  // ResetSlot restarted this ring at `reset` (the head published then; tail := reset) before
  // bumping the generation, and the successor pushes from there. Everything this consumer
  // cached or popped beyond it came from the dead incarnation: rewind to it. A reset point
  // that cannot be right (ahead of head, or more than a ring behind) is not followed.
  seen_generation_ = generation;
  uint64_t reset = reset_tail_->load(std::memory_order_acquire);
  if (reset <= head_ && head_ - reset <= capacity_) {
    head_ = reset;
  }
  cached_tail_ = head_;
  head_data_->head.store(head_, std::memory_order_release);
  // Caught up: the successor may push from here (release: after the head it will read).
  head_data_->synced_generation.store(generation, std::memory_order_release);
  producer_.Notify();  // The successor may sleep waiting for this.
  return true;
}

bool RingConsumer::HasWork() const {
  // An impossible tail (behind head, or beyond the capacity) is not work: the consumer must
  // not spin on a ring a hostile producer wedged. A reset producer is (the pop rewinds).
  if (producer_generation_ != nullptr &&
      producer_generation_->load(std::memory_order_acquire) != seen_generation_) {
    return true;
  }
  uint64_t waiting = tail_->tail.load(std::memory_order_acquire) - head_;
  return waiting != 0 && waiting <= capacity_;
}

void RingConsumer::CountInvalid() {
  head_data_->invalid_descriptors.fetch_add(1, std::memory_order_relaxed);
}

RingStatus RingConsumer::TryPop(DescriptorData* out) {
  ProducerReset(false);
  // The producer's tail is read only when every descriptor known to be published is
  // consumed; each load is checked once, when it is made.
  if (cached_tail_ == head_) {
    uint64_t tail = tail_->tail.load(std::memory_order_acquire);
    if (tail == head_) {
      return RingStatus::kEmpty;
    }
    if (tail < head_ || tail - head_ > capacity_) {
      CountInvalid();
      return RingStatus::kCorrupt;
    }
    cached_tail_ = tail;
  }
  // The header first; then only the tensors it declares (clamped, so a hostile count
  // cannot make the copy run past the slot). Fewer cache lines cross between cores.
  const DescriptorData& slot = slots_[head_ & mask_];
  std::memcpy(out, &slot, offsetof(DescriptorData, tensors));
  uint32_t used = std::min<uint32_t>(out->num_tensors, kMaxTensors);
  std::memcpy(out->tensors, slot.tensors, used * sizeof(TensorRefData));
  // Nothing of an earlier descriptor may survive in the caller's copy.
  std::memset(out->tensors + used, 0, (kMaxTensors - used) * sizeof(TensorRefData));
  // If the producer was reset while this slot was copied, the copy is the dead incarnation's
  // (its successor writes nothing until this consumer has caught up: synced_generation), so
  // it is dropped by its generation like any other; the next pop rewinds.
  ++head_;
  head_data_->head.store(head_, std::memory_order_release);
  producer_.Notify();  // A producer may sleep waiting for this slot.
  return RingStatus::kOk;
}

void SetWaitHooksForTest(WaitHooks* hooks) { wait_hooks = hooks; }

bool SpinUntil(const std::function<bool()>& ready, int64_t spin_ns) {
  int64_t until = MonotonicNs() + spin_ns;
  while (MonotonicNs() < until) {
    if (ready()) {
      return true;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  return ready();
}

bool WaitForWork(const Segment& segment, uint32_t slot, const std::function<bool()>& ready,
                 int64_t timeout_ns, int spin_iterations, WakeOn wake_on) {
  for (int i = 0; i < spin_iterations; ++i) {
    if (ready()) {
      return true;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  thread_local std::vector<uint32_t> sources;
  thread_local std::vector<FutexWaiter> words;
  WakeSources(segment, slot, wake_on, &sources);
  words.clear();
  for (uint32_t source : sources) {
    const std::atomic<uint32_t>* word = &segment.bell(source).wake[BellIndex(slot)];
    words.push_back({word, word->load(std::memory_order_acquire)});
  }
  if (wait_hooks != nullptr && wait_hooks->before_announce) {
    wait_hooks->before_announce();
  }
  BellData& bell = segment.bell(slot);
  bell.sleeping.store(wake_on == WakeOn::kEveryPeer ? kSleepsOnEveryPeer : kSleepsOnOwn,
                      std::memory_order_relaxed);
  // Pairs with the publisher's fence between publishing and reading `sleeping` (Waker).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ready()) {
    bell.sleeping.store(kAwake, std::memory_order_relaxed);
    return true;
  }
  if (wait_hooks != nullptr && wait_hooks->before_sleep) {
    wait_hooks->before_sleep();
  }
  FutexWaitAny(words, timeout_ns);
  bell.sleeping.store(kAwake, std::memory_order_relaxed);
  return ready();
}

}  // namespace ferry::shm
