#include "shm/ring.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "shm/recovery.h"
#include "tests/testing/shm_name.h"

namespace ferry::shm {
namespace {

struct Fixture {
  std::string name = testing::UniqueShmName("ring");
  Segment segment = Segment::Create(name, {1, 1, 8, 4 << 20}).value();
  uint32_t ring = segment.SubmissionRing(0, 0);
  ~Fixture() { Segment::Remove(name); }
};

DescriptorData Numbered(uint64_t sequence) {
  DescriptorData d{};
  d.kind = 1;
  d.sequence = sequence;
  return d;
}

TEST_CASE("descriptors come out in order, and a full ring refuses without overwriting") {
  Fixture f;
  RingProducer producer(f.segment, f.ring);
  RingConsumer consumer(f.segment, f.ring);
  DescriptorData out{};
  CHECK(consumer.TryPop(&out) == RingStatus::kEmpty);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
  }
  CHECK(producer.TryPush(Numbered(99)) == RingStatus::kFull);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(consumer.TryPop(&out) == RingStatus::kOk);
    CHECK(out.sequence == i);
  }
  CHECK(consumer.TryPop(&out) == RingStatus::kEmpty);
}

TEST_CASE("indices wrap around the ring many times") {
  Fixture f;
  RingProducer producer(f.segment, f.ring);
  RingConsumer consumer(f.segment, f.ring);
  DescriptorData out{};
  for (uint64_t i = 0; i < 1000; ++i) {
    REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
    REQUIRE(consumer.TryPop(&out) == RingStatus::kOk);
    CHECK(out.sequence == i);
  }
  CHECK(f.segment.ring_head(f.ring).head.load() == 1000);
}

TEST_CASE("an impossible index from a hostile peer is reported, never followed") {
  Fixture f;
  RingConsumer consumer(f.segment, f.ring);
  DescriptorData out{};
  f.segment.ring_tail(f.ring).tail.store(1000);  // A producer claiming 1000 unread descriptors.
  CHECK_FALSE(consumer.HasWork());               // Not work: a consumer must not spin on it.
  CHECK(consumer.TryPop(&out) == RingStatus::kCorrupt);
  CHECK(f.segment.ring_head(f.ring).invalid_descriptors.load() == 1);
  f.segment.ring_tail(f.ring).tail.store(0);
  RingProducer producer(f.segment, f.ring);
  f.segment.ring_head(f.ring).head.store(5);  // A consumer claiming to have read ahead of tail.
  CHECK_FALSE(producer.HasSpace());
  RingProducer fresh(f.segment, f.ring);  // One that reads the head (a cached one is stale).
  CHECK(fresh.TryPush(Numbered(1)) == RingStatus::kCorrupt);
  CHECK(f.segment.ring_tail(f.ring).tail.load() == 0);  // Nothing written.
  // A head impossibly far behind the tail is refused too.
  f.segment.ring_tail(f.ring).tail.store(100);
  f.segment.ring_head(f.ring).head.store(0);
  RingProducer restarted(f.segment, f.ring);
  CHECK_FALSE(restarted.HasSpace());
  CHECK(restarted.TryPush(Numbered(2)) == RingStatus::kCorrupt);
  CHECK(f.segment.ring_tail(f.ring).tail.load() == 100);
}

TEST_CASE("a popped copy keeps nothing of an earlier descriptor beyond its own tensors") {
  Fixture f;
  RingProducer producer(f.segment, f.ring);
  RingConsumer consumer(f.segment, f.ring);
  DescriptorData first = Numbered(1);
  first.num_tensors = 2;
  first.tensors[1].offset = 777;
  first.tensors[1].partition = 200;
  DescriptorData second = Numbered(2);
  second.num_tensors = 1;
  REQUIRE(producer.TryPush(first) == RingStatus::kOk);
  REQUIRE(producer.TryPush(second) == RingStatus::kOk);
  DescriptorData out{};
  REQUIRE(consumer.TryPop(&out) == RingStatus::kOk);
  CHECK(out.tensors[1].offset == 777);
  REQUIRE(consumer.TryPop(&out) == RingStatus::kOk);
  CHECK(out.tensors[1].offset == 0);  // Zeroed, not left over from `first`.
  CHECK(out.tensors[1].partition == 0);
}

TEST_CASE("ring geometry comes from the private header copy, not from shared memory") {
  Fixture f;
  for (const Mapping& m : f.segment.mappings()) {
    if (m.slot == kSupervisor) {  // A peer scribbles on the shared header.
      reinterpret_cast<SegmentHeaderData*>(m.bytes.data())->ring_capacity = 1u << 30;
    }
  }
  RingProducer producer(f.segment, f.ring);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
  }
  CHECK(producer.TryPush(Numbered(8)) == RingStatus::kFull);  // Still 8 slots.
  CHECK(f.segment.RingConsumerSlot(f.segment.SubmissionRing(0, 0)) == f.segment.WorkerSlot(0));
  CHECK(f.segment.RingConsumerSlot(f.segment.CompletionRing(0, 0)) == 0);
  CHECK(f.segment.RingConsumerSlot(f.segment.ControlRing(1)) == 1);
}

TEST_CASE("a consumer in another process sleeps on the doorbell and misses no wake-up") {
  Fixture f;
  constexpr int kCount = 300;
  pid_t child = fork();
  if (child == 0) {
    Segment segment = Segment::Attach(f.name, 1).value();  // The worker's view.
    RingConsumer consumer(segment, f.ring);
    uint32_t slot = segment.WorkerSlot(0);
    DescriptorData out{};
    for (int expected = 0; expected < kCount;) {
      if (consumer.TryPop(&out) == RingStatus::kOk) {
        if (out.sequence != static_cast<uint64_t>(expected)) {
          _exit(2);
        }
        ++expected;
        continue;
      }
      // No spinning: every wait goes to the futex. A lost wake-up would stall to the timeout
      // and the whole test would take kCount seconds.
      WaitForWork(
          segment, slot, [&] { return consumer.HasWork(); }, 1'000'000'000, 0);
    }
    _exit(0);
  }
  RingProducer producer(f.segment, f.ring);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCount; ++i) {
    while (producer.TryPush(Numbered(static_cast<uint64_t>(i))) != RingStatus::kOk) {
      std::this_thread::yield();
    }
    if (i % 3 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // Let it fall asleep.
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

}  // namespace
}  // namespace ferry::shm

namespace ferry::shm {
namespace {

TEST_CASE("a sleeper waking on its own and the supervisor's words sleeps through a peer's push") {
  Fixture f;
  uint32_t worker = f.segment.WorkerSlot(0);
  RingConsumer consumer(f.segment, f.ring);
  RingProducer producer(f.segment, f.ring);
  std::atomic<bool> rung{false};
  // Waits on the worker's behalf (the supervisor's view may) and returns how long it slept.
  auto sleep = [&](WakeOn wake_on, int64_t timeout_ns, std::function<void()> meanwhile) {
    std::atomic<bool> asleep{false};
    WaitHooks hooks{{}, [&] { asleep.store(true); }};
    int64_t slept = 0;
    std::thread sleeper([&] {
      SetWaitHooksForTest(&hooks);
      auto start = std::chrono::steady_clock::now();
      WaitForWork(
          f.segment, worker, [&] { return rung.load() || consumer.HasWork(); }, timeout_ns, 0,
          wake_on);
      slept = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
      SetWaitHooksForTest(nullptr);
    });
    while (!asleep.load()) {
      std::this_thread::yield();
    }
    meanwhile();
    sleeper.join();
    return slept;
  };
  constexpr int64_t kShort = 300'000'000;
  constexpr int64_t kLong = 20'000'000'000;
  // A peer's push: it ends a wait on every peer at once, not one on the own words, and it
  // bumps (and futex-wakes) the peer's word only for a wait that listens to it.
  const std::atomic<uint32_t>& peer_word =
      f.segment.bell(f.segment.RingProducerSlot(f.ring)).wake[worker];
  uint32_t bumps = 0;
  auto push = [&] {
    uint32_t before = peer_word.load();
    REQUIRE(producer.TryPush(Numbered(1)) == RingStatus::kOk);
    bumps = peer_word.load() - before;
  };
  CHECK(sleep(WakeOn::kOwnAndSupervisor, kShort, push) >= kShort);
  CHECK(bumps == 0);
  DescriptorData out{};
  REQUIRE(consumer.TryPop(&out) == RingStatus::kOk);
  CHECK(sleep(WakeOn::kEveryPeer, kLong, push) < kLong / 2);
  CHECK(bumps == 1);
  REQUIRE(consumer.TryPop(&out) == RingStatus::kOk);
  // The own doorbell (another thread of the process: a batch that finished) ends it at once.
  auto ring = [&] {
    rung.store(true);
    RingDoorbell(f.segment, worker);
  };
  CHECK(sleep(WakeOn::kOwnAndSupervisor, kLong, ring) < kLong / 2);
}

TEST_CASE("a producer asleep on a full ring is woken by the pop that frees space") {
  Fixture f;
  pid_t child = fork();
  if (child == 0) {
    // The hook host's view: it fills the ring, then sleeps until there is space, with a
    // 20 s timeout a lost wake-up would run into.
    Segment segment = Segment::Attach(f.name, 0).value();
    RingProducer producer(segment, f.ring);
    for (uint64_t i = 0; i < 8; ++i) {
      if (producer.TryPush(Numbered(i)) != RingStatus::kOk) {
        _exit(2);
      }
    }
    for (uint64_t i = 8; i < 200; ++i) {
      while (producer.TryPush(Numbered(i)) == RingStatus::kFull) {
        auto start = std::chrono::steady_clock::now();
        WaitForWork(
            segment, 0, [&] { return producer.HasSpace(); }, 20'000'000'000, 0);
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
          _exit(3);  // Woken by the timeout, not by the pop.
        }
      }
    }
    _exit(0);
  }
  RingConsumer consumer(f.segment, f.ring);
  DescriptorData out{};
  auto start = std::chrono::steady_clock::now();
  for (uint64_t expected = 0; expected < 200;) {
    if (consumer.TryPop(&out) == RingStatus::kOk) {
      REQUIRE(out.sequence == expected);
      ++expected;
      if (expected % 8 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // Let it fall asleep.
      }
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("recovery wakes a producer asleep on a ring whose consumer died") {
  Fixture f;
  RingProducer producer(f.segment, f.ring);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
  }
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    WaitForWork(
        f.segment, 0, [&] { return producer.HasSpace(); }, 20'000'000'000, 0);
    woke = producer.HasSpace();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = std::chrono::steady_clock::now();
  ResetSlot(f.segment, f.segment.WorkerSlot(0));  // The consumer died with a full ring.
  sleeper.join();
  CHECK(woke);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

}  // namespace
}  // namespace ferry::shm

namespace ferry::shm {
namespace {

// The two races of the sleep protocol, made to happen every time: the producer publishes at
// exactly the dangerous point, from inside the consumer's WaitForWork (a hook). A protocol
// missing the re-check or the word's bump would sleep to the 5 s timeout.
TEST_CASE("a publication at either dangerous point of the sleep protocol is never lost") {
  for (int point = 0; point < 2; ++point) {
    CAPTURE(point);
    Fixture f;
    RingProducer producer(f.segment, f.ring);
    RingConsumer consumer(f.segment, f.ring);
    uint32_t slot = f.segment.WorkerSlot(0);
    bool announced_when_published = false;
    auto publish = [&] {
      announced_when_published = f.segment.bell(slot).sleeping.load() != 0;
      REQUIRE(producer.TryPush(Numbered(1)) == RingStatus::kOk);
    };
    WaitHooks hooks;
    (point == 0 ? hooks.before_announce : hooks.before_sleep) = publish;
    SetWaitHooksForTest(&hooks);
    auto start = std::chrono::steady_clock::now();
    bool ready = WaitForWork(
        f.segment, slot, [&] { return consumer.HasWork(); }, 5'000'000'000, 0);
    SetWaitHooksForTest(nullptr);
    CHECK(ready);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    // Point 0: the producer saw no sleeper (no bump): only the re-check finds the work.
    // Point 1: the re-check is past: only the bump of the word wakes the futex wait.
    CHECK(announced_when_published == (point == 1));
    CHECK(f.segment.bell(slot).sleeping.load() == 0);
  }
}

TEST_CASE("the same at the two points for a producer waiting for space") {
  for (int point = 0; point < 2; ++point) {
    CAPTURE(point);
    Fixture f;
    RingProducer producer(f.segment, f.ring);
    RingConsumer consumer(f.segment, f.ring);
    for (uint64_t i = 0; i < 8; ++i) {
      REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
    }
    DescriptorData out{};
    auto pop = [&] { REQUIRE(consumer.TryPop(&out) == RingStatus::kOk); };
    WaitHooks hooks;
    (point == 0 ? hooks.before_announce : hooks.before_sleep) = pop;
    SetWaitHooksForTest(&hooks);
    auto start = std::chrono::steady_clock::now();
    bool ready = WaitForWork(
        f.segment, 0, [&] { return producer.HasSpace(); }, 5'000'000'000, 0);
    SetWaitHooksForTest(nullptr);
    CHECK(ready);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }
}

TEST_CASE("recovery wakes a worker asleep on a full completion ring whose hook host died") {
  // The sleeper is slot 1 here (slot 0 above): every slot's word of the dead one is bumped.
  Segment segment = Segment::Create(testing::UniqueShmName("ring"), {1, 1, 8, 4 << 20}).value();
  uint32_t ring = segment.CompletionRing(0, 0);
  RingProducer producer(segment, ring);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
  }
  std::thread sleeper([&] {
    WaitForWork(
        segment, 1, [&] { return producer.HasSpace(); }, 20'000'000'000, 0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = std::chrono::steady_clock::now();
  ResetSlot(segment, 0);
  sleeper.join();
  CHECK(producer.HasSpace());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  Segment::Remove(segment.name());
}

TEST_CASE("a control ring's consumer has work only when the supervisor pushed") {
  Fixture f;
  RingConsumer control(f.segment, f.segment.ControlRing(0));
  CHECK_FALSE(control.HasWork());
  RingProducer supervisor(f.segment, f.segment.ControlRing(0));
  REQUIRE(supervisor.TryPush(Numbered(5)) == RingStatus::kOk);
  CHECK(control.HasWork());
  DescriptorData out{};
  REQUIRE(control.TryPop(&out) == RingStatus::kOk);
  CHECK(out.sequence == 5);
  CHECK_FALSE(control.HasWork());
}

TEST_CASE("recovery wakes a producer that read its words just before the reset") {
  // The sleeper has re-checked (still full) and is about to wait when the consumer's slot is
  // reset: only the bump of the dead slot's word (the wait compares it) can wake it.
  Fixture f;
  RingProducer producer(f.segment, f.ring);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(producer.TryPush(Numbered(i)) == RingStatus::kOk);
  }
  WaitHooks hooks;
  hooks.before_sleep = [&] { ResetSlot(f.segment, f.segment.WorkerSlot(0)); };
  SetWaitHooksForTest(&hooks);
  auto start = std::chrono::steady_clock::now();
  bool ready = WaitForWork(
      f.segment, 0, [&] { return producer.HasSpace(); }, 5'000'000'000, 0);
  SetWaitHooksForTest(nullptr);
  CHECK(ready);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}

}  // namespace
}  // namespace ferry::shm
