// Bounded lock-free single-producer single-consumer rings of fixed-size descriptors, and the
// wake-ups that let either side sleep.
//
// Ordering (layout.h RingHeadData / RingTailData): the producer writes the descriptor, then
// publishes tail + 1 with release; the consumer loads tail once with acquire, copies the
// descriptor out, then publishes head + 1 with release, handing the slot back. Each index is
// read once per operation and checked: a peer that writes nonsense into its index makes the
// ring report kCorrupt, never an out-of-bounds access. tail lives in the producer's object and
// head in the consumer's, so each side can write only its own.
//
// Wake-ups, both directions: a process about to sleep reads the words that may wake it (its
// own wake[self], the supervisor's and every peer's of the other kind), sets its `sleeping`
// flag, re-checks its condition and futex_waitv's on all those words at once. A process that
// published something (a push: a consumer's work; a pop: a full ring's space) issues a
// seq_cst fence, reads the other side's `sleeping` and, if set, bumps its own wake[other] and
// futex-wakes it. The fences (Dekker) guarantee that the sleeper's re-check sees the
// publication or the publisher sees the flag, and a bump after the sleeper read the word
// makes futex_waitv return at once: no lost wake-up in either direction. Nobody writes
// another process's memory to wake it.
//
// Thread safety: one producer object and one consumer object per ring, each used by one
// thread at a time.
// Process safety: head is consumer-written, tail producer-written, each in its writer's own
// object; a dead peer's index stays at its last published value until ResetSlot repairs it.
#pragma once

#include <cstdint>
#include <functional>

#include "shm/segment.h"

namespace ferry::shm {

enum class RingStatus { kOk, kFull, kEmpty, kCorrupt };

// Wakes one process on behalf of another. REQUIRES: the waker's bell is writable in this view.
class Waker {
 public:
  Waker(const Segment& segment, uint32_t from, uint32_t to);
  // After publishing: wakes `to` if it announced that it sleeps on `from`'s word (fence, then
  // one load). A peer's publication does not wake a process that sleeps on its own and the
  // supervisor's words only (WakeOn::kOwnAndSupervisor): no futex call for a wait that does
  // not listen.
  void Notify() const;

 private:
  const BellData* target_;
  std::atomic<uint32_t>* word_;  // from's wake[to].
  bool peer_;                    // `from` is neither `to` nor the supervisor.
};

class RingProducer {
 public:
  // REQUIRES: the producer's object is writable in this view. Starts from the published tail.
  RingProducer(const Segment& segment, uint32_t ring);
  // kOk, kFull (nothing written), or kCorrupt (the consumer's head is impossible: ahead of
  // tail or more than a ring behind; nothing written). A producer restarted after a reset of
  // its slot reports kFull until the consumer has caught up with the reset (RingConsumer).
  RingStatus TryPush(const DescriptorData& descriptor);
  // True when TryPush would not report kFull or kCorrupt (one acquire load).
  bool HasSpace() const;
  // How many descriptors TryPush would take now: 0 when it would report kFull or kCorrupt.
  uint64_t Space() const;
  uint32_t ring_index() const { return index_; }

 private:
  bool Synced() const;  // The consumer has caught up with this producer's generation.

  const RingHeadData* head_;
  RingTailData* tail_data_;
  DescriptorData* slots_;
  Waker consumer_;
  uint32_t index_;
  uint64_t mask_;
  uint64_t tail_;         // Private copy: the producer is tail's only writer.
  uint64_t cached_head_;  // The consumer's head when last read (never ahead of the real one).
  uint32_t own_generation_ = 0;
  bool synced_ = true;  // Control rings (the supervisor's) always are.
};

class RingConsumer {
 public:
  // REQUIRES: the consumer's object is writable in this view.
  RingConsumer(const Segment& segment, uint32_t ring);
  // kOk with *out filled (a private copy of the header and of the min(num_tensors, 8)
  // tensors it declares; validate it before use), kEmpty, or kCorrupt (the producer's tail
  // is impossible; counted in invalid_descriptors). A pop wakes a producer sleeping for space.
  // When the producer's slot was reset (its generation moved), the ring is first rewound to
  // where ResetSlot restarted it: nothing cached from the dead incarnation is popped after
  // that, and the successor writes nothing before it (synced_generation).
  RingStatus TryPop(DescriptorData* out);
  // True when a descriptor is waiting (one acquire load; false for an impossible tail), or
  // when the producer was reset and this consumer has not caught up (its next TryPop does).
  bool HasWork() const;
  // Counts a descriptor that failed validation (visible to anyone reading the ring).
  void CountInvalid();
  uint32_t ring_index() const { return index_; }

 private:
  RingHeadData* head_data_;
  const RingTailData* tail_;
  const DescriptorData* slots_;
  Waker producer_;
  uint32_t index_;
  uint64_t capacity_;
  uint64_t mask_;
  // Rewinds after a reset of the producer's slot (or when `force`d) and publishes that it has
  // caught up; true if it did.
  bool ProducerReset(bool force);

  uint64_t head_;         // Private copy: the consumer is head's only writer.
  uint64_t cached_tail_;  // The producer's tail when last read and checked.
  // The producer's slot generation (null for the supervisor's control rings), the one last
  // seen, and where recovery restarts the ring.
  const std::atomic<uint32_t>* producer_generation_ = nullptr;
  const std::atomic<uint64_t>* reset_tail_ = nullptr;
  uint32_t seen_generation_ = 0;
};

// Wakes `slot` from inside its own process (e.g. the worker's execution thread when a batch
// finishes). REQUIRES: this view owns `slot` (or is the supervisor's).
void RingDoorbell(const Segment& segment, uint32_t slot);

// Whose publications wake a sleeper: every peer's (the rings' producers and consumers), or
// only its own process's doorbell (RingDoorbell) and the supervisor's (control, recovery).
// With kOwnAndSupervisor the sleeper announces so in `sleeping` (kSleepsOnOwn): a peer's push
// reads it and neither bumps its word nor calls futex wake; the sleeper sees the push when it
// next wakes.
enum class WakeOn { kEveryPeer, kOwnAndSupervisor };

// One thread per slot may wait at a time (the bell has one sleeping flag).
// Blocks the calling thread of `slot`'s process until `ready()` or timeout: spins
// `spin_iterations` checks, then sleeps on every word that may wake the slot (see above), or
// only the own and supervisor's words. Returns ready()'s last value. Without futex_waitv
// (Linux < 5.16) it sleeps in steps of at most 50 us instead. REQUIRES: `slot` is a slot (the
// supervisor waits on its own event loop, never here) and this view owns it (or is the
// supervisor's).
bool WaitForWork(const Segment& segment, uint32_t slot, const std::function<bool()>& ready,
                 int64_t timeout_ns, int spin_iterations = 2000,
                 WakeOn wake_on = WakeOn::kEveryPeer);

// Polls `ready()` for up to `spin_ns` (CLOCK_MONOTONIC) without sleeping; ready()'s last value.
// For a thread that expects work within microseconds and would rather burn them than pay a
// wake-up (common/poll.h says when).
bool SpinUntil(const std::function<bool()>& ready, int64_t spin_ns);

// Tests only: code run by WaitForWork on this thread at the two points where a publication
// by a peer is the dangerous race: after the wake-up words are read but before `sleeping` is
// announced (only the re-check can see it), and after the re-check but before the futex wait
// (only the word's bump can). Null hooks cost one thread-local load.
struct WaitHooks {
  std::function<void()> before_announce;
  std::function<void()> before_sleep;
};
void SetWaitHooksForTest(WaitHooks* hooks);  // nullptr: none. Not owned.

}  // namespace ferry::shm
