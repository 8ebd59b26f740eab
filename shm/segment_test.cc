#include "shm/segment.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <set>

#include "shm/arena.h"
#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/status.h"
#include "tests/testing/shm_name.h"

namespace ferry::shm {
namespace {

// Removes the segment when the test ends.
struct Named {
  std::string name = testing::UniqueShmName("segment");
  ~Named() { Segment::Remove(name); }
};

SegmentHeaderData& Header(const Segment& segment) {
  for (const Mapping& m : segment.mappings()) {
    if (m.slot == kSupervisor) {
      return *reinterpret_cast<SegmentHeaderData*>(m.bytes.data());
    }
  }
  FAIL("no supervisor mapping");
  std::abort();
}

TEST_CASE("a segment is one object per writer, each mode 0600, that others can attach to") {
  Named n;
  Result<Segment> created = Segment::Create(n.name, {2, 3, 64, 16 << 20});
  REQUIRE_MESSAGE(created.ok(), (created.ok() ? "" : created.error().message));
  for (uint32_t slot : {kSupervisor, 0u, 1u, 2u, 3u, 4u}) {
    struct stat st {};
    REQUIRE(::stat(("/dev/shm/" + Segment::ObjectName(n.name, slot)).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  Result<Segment> attached = Segment::Attach(n.name, kSupervisor);
  REQUIRE(attached.ok());
  CHECK(attached->num_slots() == 5);
  CHECK(attached->WorkerSlot(0) == 2);
  CHECK(attached->num_rings() == 2 * 2 * 3 + 5);
  CHECK(attached->partition_bytes() % 256 == 0);
  CHECK(attached->RingProducerSlot(attached->SubmissionRing(1, 2)) == 1);
  CHECK(attached->RingConsumerSlot(attached->SubmissionRing(1, 2)) == 4);
  CHECK(attached->RingProducerSlot(attached->CompletionRing(2, 1)) == 4);
  CHECK(attached->RingConsumerSlot(attached->CompletionRing(2, 1)) == 1);
  CHECK(attached->RingProducerSlot(attached->ControlRing(3)) == kSupervisor);
  CHECK(attached->RingConsumerSlot(attached->ControlRing(3)) == 3);
  CHECK(attached->generation(0).load() == 1);
  // Both views see the same bytes.
  created->partition(4)[10] = 42;
  CHECK(attached->partition(4)[10] == 42);
  // Every ring's two sides are distinct memory: a tail in its producer's object, a head in
  // its consumer's (nothing of one ring overlaps another's).
  std::set<const void*> seen;
  for (uint32_t r = 0; r < attached->num_rings(); ++r) {
    CHECK(seen.insert(&attached->ring_head(r)).second);
    CHECK(seen.insert(&attached->ring_tail(r)).second);
  }
  // A partition is page aligned (cudaHostRegister) and ends inside its object.
  for (const Mapping& m : attached->mappings()) {
    if (m.slot != kSupervisor) {
      std::span<uint8_t> p = attached->partition(m.slot);
      CHECK(reinterpret_cast<uintptr_t>(p.data()) % 4096 == 0);
      CHECK(p.data() + p.size() == m.bytes.data() + m.bytes.size());
    }
  }
  CHECK(attached->mappings().size() == 6);
}

TEST_CASE("a slot's view maps its own object writable and only its peers' read-only") {
  Named n;
  Segment created = Segment::Create(n.name, {2, 2, 64, 16 << 20}).value();
  Segment hookhost = Segment::Attach(n.name, 1).value();
  CHECK(hookhost.owner() == 1);
  CHECK(hookhost.IsWritable(1));
  CHECK(hookhost.IsMapped(kSupervisor));
  CHECK_FALSE(hookhost.IsWritable(kSupervisor));
  CHECK_FALSE(hookhost.IsMapped(0));  // Another hook host's tensors: not even readable.
  CHECK(hookhost.IsMapped(2));
  CHECK_FALSE(hookhost.IsWritable(2));
  CHECK_FALSE(hookhost.IsWritable(3));
  Segment worker = Segment::Attach(n.name, 3).value();
  CHECK(worker.IsWritable(3));
  CHECK_FALSE(worker.IsMapped(2));
  CHECK(worker.IsMapped(0));
  CHECK_FALSE(worker.IsWritable(0));
  CHECK_FALSE(worker.IsWritable(1));
  CHECK(worker.mappings().size() == 4);  // Itself, two hook hosts, the supervisor.
  // Reads through a read-only view see the writer's bytes.
  created.partition(1)[7] = 9;
  CHECK(worker.partition(1)[7] == 9);
  CHECK(Segment::Attach(n.name, 4).error().code == ErrorCode::kInvalidArgument);
}

TEST_CASE("writes through a read-only mapping fault and the mapping cannot be made writable") {
  Named n;
  Segment created = Segment::Create(n.name, {1, 1, 64, 4 << 20}).value();
  Segment hookhost = Segment::Attach(n.name, 0).value();
  for (const Mapping& m : hookhost.mappings()) {
    if (m.writable) {
      m.bytes[m.bytes.size() - 1] = 1;  // Its own object: fine.
      continue;
    }
    // The descriptor was opened O_RDONLY: PROT_WRITE is refused on a shared mapping of it.
    CHECK(mprotect(m.bytes.data(), m.bytes.size(), PROT_READ | PROT_WRITE) == -1);
    CHECK(errno == EACCES);
    pid_t child = fork();
    if (child == 0) {
      signal(SIGSEGV, SIG_DFL);         // Not doctest's or a sanitizer's handler: die of the fault.
      m.bytes[m.bytes.size() / 2] = 1;  // Faults.
      _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGSEGV);
    CHECK(m.bytes[m.bytes.size() / 2] == 0);  // Nothing was written.
  }
}

TEST_CASE("a stale segment of the same name never blocks a new start") {
  Named n;
  {
    Result<Segment> crashed = Segment::Create(n.name, {1, 1, 64, 4 << 20});
    REQUIRE(crashed.ok());
    crashed->generation(0).store(99);
  }  // Unmapped but never removed, as after a crash.
  Result<Segment> fresh = Segment::Create(n.name, {1, 1, 64, 4 << 20});
  REQUIRE(fresh.ok());
  CHECK(fresh->generation(0).load() == 1);
  // A stale segment of another shape (more slots) leaves nothing behind either.
  REQUIRE(Segment::Create(n.name, {3, 2, 64, 8 << 20}).ok());
  REQUIRE(Segment::Create(n.name, {1, 1, 64, 4 << 20}).ok());
  struct stat st {};
  CHECK(::stat(("/dev/shm/" + Segment::ObjectName(n.name, 4)).c_str(), &st) != 0);
  CHECK(Segment::Remove(n.name));
  CHECK(::stat(("/dev/shm/" + n.name).c_str(), &st) != 0);
  CHECK(::stat(("/dev/shm/" + Segment::ObjectName(n.name, 0)).c_str(), &st) != 0);
}

TEST_CASE("attaching to another layout version or a foreign segment is a clear error") {
  Named n;
  Result<Segment> created = Segment::Create(n.name, {1, 1, 64, 4 << 20});
  REQUIRE(created.ok());
  SegmentHeaderData& header = Header(*created);
  header.layout_version = kLayoutVersion + 1;
  Result<Segment> attached = Segment::Attach(n.name, 0);
  REQUIRE_FALSE(attached.ok());
  CHECK(attached.error().message.find("layout version " + std::to_string(kLayoutVersion + 1) +
                                      ", this build speaks " + std::to_string(kLayoutVersion)) !=
        std::string::npos);
  header.layout_version = kLayoutVersion;
  header.magic = 1;
  CHECK(Segment::Attach(n.name, 0).error().message.find("bad magic") != std::string::npos);
  header.magic = kMagic;
  header.partition_bytes += 256;
  CHECK(Segment::Attach(n.name, 0).error().message.find("does not match") != std::string::npos);
  header.partition_bytes -= 256;
  header.ring_capacity = 100;
  CHECK(Segment::Attach(n.name, 0).error().message.find("does not match") != std::string::npos);
  header.ring_capacity = 64;
  header.hookhosts = 0x80000000u;
  header.workers = 0x80000001u;  // Sums to 1 in 32 bits.
  CHECK(Segment::Attach(n.name, 0).error().message.find("does not match") != std::string::npos);
  header.hookhosts = 1;
  header.workers = 1;
  header.total_bytes = 8 << 20;  // Would give larger partitions than the objects hold.
  CHECK(Segment::Attach(n.name, 0).error().message.find("does not match") != std::string::npos);
  header.total_bytes = 4 << 20;
  REQUIRE(Segment::Attach(n.name, 0).ok());
  // A slot object of the wrong size (truncated by someone) is refused, not mapped short.
  int fd = shm_open(Segment::ObjectName(n.name, 1).c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 4096) == 0);
  close(fd);
  CHECK(Segment::Attach(n.name, 0).error().message.find("does not match") != std::string::npos);
  CHECK(Segment::Attach(n.name + "-absent", 0).error().code == ErrorCode::kNotFound);
}

TEST_CASE("layouts that cannot work are refused") {
  Named n;
  CHECK(Segment::Create(n.name, {0, 1, 64, 4 << 20}).error().code == ErrorCode::kInvalidArgument);
  CHECK(Segment::Create(n.name, {1, 1, 100, 4 << 20}).error().message.find("power of two") !=
        std::string::npos);
  CHECK(Segment::Create(n.name, {8, 8, 1024, 4 << 20}).error().message.find("shm_size") !=
        std::string::npos);
  // More of a kind than one futex_waitv can wait on.
  CHECK(Segment::Create(n.name, {kMaxPerKind + 1, 1, 4, 64 << 20}).error().code ==
        ErrorCode::kInvalidArgument);
  CHECK(Segment::Create(n.name, {1, kMaxPerKind, 4, 64 << 20}).ok());
  CHECK(Segment::NameForNode("edge-1") == "ferry-edge-1");
}

TEST_CASE("the arena allocates 256-byte aligned blocks by offset and accounts for them") {
  Named n;
  Segment segment = Segment::Create(n.name, {1, 1, 64, 4 << 20}).value();
  Arena arena(segment, 0);
  Block a = arena.Allocate(100).value();
  Block b = arena.Allocate(300).value();
  CHECK(a.offset % 256 == 0);
  CHECK(b.offset % 256 == 0);
  CHECK(b.offset >= a.offset + 256);
  ArenaStats stats = ReadArenaStats(segment, 0);
  CHECK(stats.bytes_in_use == 256 + 512);
  CHECK(stats.blocks_in_use == 2);
  std::memset(arena.Bytes(b).data(), 7, b.bytes);
  CHECK(segment.partition(0)[b.offset + 299] == 7);
  REQUIRE(arena.Free(a.offset).ok());
  REQUIRE(arena.Free(b.offset).ok());
  stats = ReadArenaStats(segment, 0);
  CHECK(stats.bytes_in_use == 0);
  CHECK(stats.high_water == 768);
  CHECK(arena.Free(b.offset).error().message.find("not a live block") != std::string::npos);
  CHECK(arena.Allocate(0).error().code == ErrorCode::kInvalidArgument);
}

TEST_CASE("a full arena gives backpressure and loses nothing") {
  Named n;
  Segment segment = Segment::Create(n.name, {1, 1, 64, 4 << 20}).value();
  Arena arena(segment, 0);
  uint64_t capacity = segment.partition_bytes();
  Block half = arena.Allocate(capacity / 2).value();
  std::memset(arena.Bytes(half).data(), 0x5a, half.bytes);
  Result<Block> too_big = arena.Allocate(capacity / 2 + 4096);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().code == ErrorCode::kResourceExhausted);
  CHECK(too_big.error().message.find("arena of slot 0 is full") != std::string::npos);
  CHECK(ReadArenaStats(segment, 0).failed_allocations == 1);
  CHECK(arena.Bytes(half)[half.bytes - 1] == 0x5a);  // Untouched.
  CHECK(arena.Allocate(capacity * 4).error().code == ErrorCode::kResourceExhausted);
  // Freed space coalesces: after freeing, the whole partition is one extent again.
  REQUIRE(arena.Free(half.offset).ok());
  CHECK(arena.Allocate(capacity).ok());
}

TEST_CASE("ResetSlot bumps the generation, zeroes accounting and drains rings it consumed") {
  Named n;
  Segment segment = Segment::Create(n.name, {1, 1, 64, 4 << 20}).value();
  {
    Arena arena(segment, 0);
    REQUIRE(arena.Allocate(1000).ok());
  }  // The owner "dies" holding a block.
  CHECK(ReadArenaStats(segment, 0).bytes_in_use == 1024);
  uint32_t completions = segment.CompletionRing(0, 0);
  segment.ring_tail(completions).tail.store(5);  // Five completions waiting for the dead host.
  CHECK(ResetSlot(segment, 0) == 2);
  CHECK(segment.generation(0).load() == 2);
  CHECK(ReadArenaStats(segment, 0).bytes_in_use == 0);
  CHECK(ReadArenaStats(segment, 0).high_water == 1024);  // Cumulative: kept when sane.
  CHECK(segment.ring_head(completions).head.load() == 5);
  CHECK(IsCurrent(segment, 0, 2));
  CHECK_FALSE(IsCurrent(segment, 0, 1));
  // The worker's own ring state is untouched.
  CHECK(segment.generation(1).load() == 1);
  CHECK(segment.ring_tail(completions).tail.load() == 5);
}

// Fills every byte of `slot`'s object with random bytes, as a process with a wild pointer
// (or a hostile plugin) may have done before it died.
void Scribble(const Segment& segment, uint32_t slot, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const Mapping& m : segment.mappings()) {
    if (m.slot == slot) {
      for (uint8_t& b : m.bytes) {
        b = static_cast<uint8_t>(rng());
      }
    }
  }
}

TEST_CASE("ResetSlot repairs every index a scribbling process could write; its successor serves") {
  for (uint32_t victim : {0u, 1u}) {  // The hook host, then the worker.
    CAPTURE(victim);
    Named n;
    Segment segment = Segment::Create(n.name, {1, 1, 8, 4 << 20}).value();
    uint32_t submissions = segment.SubmissionRing(0, 0);
    uint32_t completions = segment.CompletionRing(0, 0);
    uint32_t survivor = 1 - victim;
    // The survivor's side of both rings has seen traffic (private indices at 3).
    RingProducer live_out(segment, victim == 0 ? completions : submissions);
    RingConsumer live_in(segment, victim == 0 ? submissions : completions);
    {
      RingProducer dead_out(segment, victim == 0 ? submissions : completions);
      RingConsumer dead_in(segment, victim == 0 ? completions : submissions);
      DescriptorData d{};
      for (int i = 0; i < 3; ++i) {
        REQUIRE(dead_out.TryPush(d) == RingStatus::kOk);
        REQUIRE(live_in.TryPop(&d) == RingStatus::kOk);
        REQUIRE(live_out.TryPush(d) == RingStatus::kOk);
        REQUIRE(dead_in.TryPop(&d) == RingStatus::kOk);
      }
    }
    Scribble(segment, victim, 99 + victim);
    uint32_t generation = ResetSlot(segment, victim);
    CHECK(generation == 2);
    CHECK(segment.generation(survivor).load() == 1);  // Not the dead process's to write.
    CHECK(ReadArenaStats(segment, victim).bytes_in_use == 0);
    CHECK(ReadArenaStats(segment, victim).blocks_in_use == 0);
    CHECK(ReadArenaStats(segment, victim).high_water <= segment.partition_bytes());
    CHECK(segment.bell(victim).sleeping.load() == 0);
    for (uint32_t r = 0; r < segment.num_rings(); ++r) {
      if (segment.RingConsumerSlot(r) == victim) {
        CHECK(segment.ring_head(r).invalid_descriptors.load() == 0);
      }
    }
    CHECK(ReadStatus(segment, victim).ok());
    // Both rings are consistent again: the successor pushes and pops, many times around.
    RingProducer next_out(segment, victim == 0 ? submissions : completions);
    RingConsumer next_in(segment, victim == 0 ? completions : submissions);
    DescriptorData d{};
    CHECK(live_in.TryPop(&d) == RingStatus::kEmpty);
    CHECK(next_in.TryPop(&d) == RingStatus::kEmpty);
    for (uint64_t i = 0; i < 40; ++i) {
      d.sequence = i;
      REQUIRE(next_out.TryPush(d) == RingStatus::kOk);
      REQUIRE(live_in.TryPop(&d) == RingStatus::kOk);
      CHECK(d.sequence == i);
      REQUIRE(live_out.TryPush(d) == RingStatus::kOk);
      REQUIRE(next_in.TryPop(&d) == RingStatus::kOk);
      CHECK(d.sequence == i);
    }
    Arena arena(segment, victim);
    CHECK(arena.Allocate(segment.partition_bytes()).ok());  // The whole arena is free.
  }
}

TEST_CASE("a consumer rewinds to where recovery restarted a ring, past what it had cached") {
  Named n;
  Segment segment = Segment::Create(n.name, {1, 1, 8, 4 << 20}).value();
  uint32_t ring = segment.SubmissionRing(0, 0);
  RingConsumer consumer(segment, ring);
  DescriptorData d{};
  constexpr uint64_t kBefore = 20;  // Around the 8-slot ring a few times first.
  {
    RingProducer dead(segment, ring);
    for (uint64_t i = 0; i < kBefore; ++i) {
      REQUIRE(dead.TryPush(d) == RingStatus::kOk);
      REQUIRE(consumer.TryPop(&d) == RingStatus::kOk);
    }
    for (uint64_t i = 1; i <= 4; ++i) {
      d.sequence = i;
      REQUIRE(dead.TryPush(d) == RingStatus::kOk);
    }
  }
  REQUIRE(consumer.TryPop(&d) == RingStatus::kOk);  // It has seen tail = 24 and read one.
  CHECK(d.sequence == 1);
  ResetSlot(segment, 0);  // The producer died; tail := head = 21.
  CHECK(segment.ring_tail(ring).tail.load() == kBefore + 1);
  CHECK(segment.ring_reset_tail(ring).load() == kBefore + 1);
  RingProducer successor(segment, ring);
  // It writes nothing until the consumer has caught up with the reset.
  CHECK_FALSE(successor.HasSpace());
  CHECK(successor.TryPush(d) == RingStatus::kFull);
  CHECK(consumer.TryPop(&d) == RingStatus::kEmpty);  // Catches up; its cache is dropped.
  CHECK(segment.ring_head(ring).synced_generation.load() == 2);
  CHECK(successor.HasSpace());
  d.sequence = 70;
  REQUIRE(successor.TryPush(d) == RingStatus::kOk);  // Overwrites slot 1.
  d.sequence = 71;
  REQUIRE(successor.TryPush(d) == RingStatus::kOk);
  // Without the rewind the consumer would pop slots 1..3 from its cache: 70, then the dead
  // incarnation's 3 and 4, then find head ahead of tail.
  REQUIRE(consumer.TryPop(&d) == RingStatus::kOk);
  CHECK(d.sequence == 70);
  REQUIRE(consumer.TryPop(&d) == RingStatus::kOk);
  CHECK(d.sequence == 71);
  CHECK(consumer.TryPop(&d) == RingStatus::kEmpty);
  // A pop that lands after the reset (its tail read before, its head published after) is
  // undone by the same rewind: the successor's first descriptor is not skipped.
  d.sequence = 72;
  REQUIRE(successor.TryPush(d) == RingStatus::kOk);
  REQUIRE(consumer.TryPop(&d) == RingStatus::kOk);  // Index 23: private head 24.
  segment.ring_head(ring).head.store(kBefore + 3);  // Read by the supervisor before 24 lands.
  ResetSlot(segment, 0);                            // Reset point 23, tail := 23.
  segment.ring_head(ring).head.store(kBefore + 4);  // The late publish.
  RingProducer third(segment, ring);
  d.sequence = 90;
  CHECK_FALSE(third.HasSpace());
  CHECK(third.TryPush(d) == RingStatus::kFull);      // Head ahead of tail: wait for the rewind.
  CHECK(consumer.TryPop(&d) == RingStatus::kEmpty);  // Sees the bump: rewinds to 23.
  CHECK(segment.ring_head(ring).head.load() == kBefore + 3);
  CHECK(third.HasSpace());
  d.sequence = 90;
  REQUIRE(third.TryPush(d) == RingStatus::kOk);
  REQUIRE(consumer.TryPop(&d) == RingStatus::kOk);
  CHECK(d.sequence == 90);
}

}  // namespace
}  // namespace ferry::shm
