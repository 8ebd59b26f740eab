#include "shm/ring.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

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
  CHECK(f.segment.ring(f.ring).head.load() == 1000);
}

TEST_CASE("an impossible index from a hostile peer is reported, never followed") {
  Fixture f;
  RingConsumer consumer(f.segment, f.ring);
  DescriptorData out{};
  f.segment.ring(f.ring).tail.store(1000);  // A producer claiming 1000 unread descriptors.
  CHECK_FALSE(consumer.HasWork());          // Not work: a consumer must not spin on it.
  CHECK(consumer.TryPop(&out) == RingStatus::kCorrupt);
  CHECK(f.segment.ring(f.ring).invalid_descriptors.load() == 1);
  f.segment.ring(f.ring).tail.store(0);
  RingProducer producer(f.segment, f.ring);
  f.segment.ring(f.ring).head.store(5);  // A consumer claiming to have read ahead of tail.
  CHECK(producer.TryPush(Numbered(1)) == RingStatus::kCorrupt);
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
  f.segment.ring(f.ring).capacity = 1u << 30;  // A peer scribbles on the shared copy.
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
    Segment segment = Segment::Attach(f.name).value();
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
