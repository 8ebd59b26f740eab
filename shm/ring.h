// Bounded lock-free single-producer single-consumer rings of fixed-size descriptors, and the
// doorbell a consumer sleeps on.
//
// Ordering (layout.h RingData): the producer writes the descriptor, then publishes
// tail + 1 with release; the consumer loads tail once with acquire, copies the descriptor
// out, then publishes head + 1 with release, handing the slot back. Each index is read once
// per operation and checked: a peer that writes nonsense into its index makes the ring report
// kCorrupt, never an out-of-bounds access.
//
// Wake-up: a consumer spins briefly, then announces `sleeping` and futex-waits on its
// doorbell word; a producer that sees `sleeping` after publishing bumps the word and wakes it.
// A seq_cst fence on each side (Dekker) guarantees one of them sees the other: no lost wake-up.
// No pthread mutex or condition variable is shared between processes.
//
// Thread safety: one producer object and one consumer object per ring, each used by one
// thread at a time.
// Process safety: head is consumer-written, tail producer-written; a dead peer's index stays
// at its last published value.
#pragma once

#include <cstdint>
#include <functional>

#include "shm/segment.h"

namespace ferry::shm {

enum class RingStatus { kOk, kFull, kEmpty, kCorrupt };

class RingProducer {
 public:
  RingProducer(const Segment& segment, uint32_t ring);
  // kOk, kFull (nothing written), or kCorrupt (the consumer's head is impossible).
  RingStatus TryPush(const DescriptorData& descriptor);
  uint32_t ring_index() const { return index_; }

 private:
  RingData* ring_;
  DescriptorData* slots_;
  DoorbellData* doorbell_;
  uint32_t index_;
  uint64_t mask_;
  uint64_t tail_;  // Private copy: the producer is tail's only writer.
};

class RingConsumer {
 public:
  RingConsumer(const Segment& segment, uint32_t ring);
  // kOk with *out filled (a private copy of the header and of the min(num_tensors, 8)
  // tensors it declares; validate it before use), kEmpty, or kCorrupt (the producer's tail
  // is impossible; counted in invalid_descriptors).
  RingStatus TryPop(DescriptorData* out);
  // True when a descriptor is waiting (one acquire load); false for an impossible tail.
  bool HasWork() const;
  // Counts a descriptor that failed validation (visible to anyone reading the ring).
  void CountInvalid();
  uint32_t ring_index() const { return index_; }

 private:
  RingData* ring_;
  DescriptorData* slots_;
  uint32_t index_;
  uint64_t capacity_;
  uint64_t mask_;
  uint64_t head_;  // Private copy: the consumer is head's only writer.
};

// Wakes `consumer_slot` if it sleeps on its doorbell (any thread of any process may ring it:
// e.g. the worker's execution thread when a batch finishes). Same fences as TryPush.
void RingDoorbell(const Segment& segment, uint32_t consumer_slot);

// One thread per slot may wait at a time (the doorbell has one sleeping flag).
// Blocks the calling consumer until `ready()` or timeout: spins `spin_iterations` checks,
// then sleeps on the slot's doorbell futex. Returns ready()'s last value.
bool WaitForWork(const Segment& segment, uint32_t consumer_slot, const std::function<bool()>& ready,
                 int64_t timeout_ns, int spin_iterations = 2000);

}  // namespace ferry::shm
