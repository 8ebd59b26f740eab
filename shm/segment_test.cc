#include "shm/segment.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstring>

#include "shm/arena.h"
#include "shm/recovery.h"
#include "tests/testing/shm_name.h"

namespace ferry::shm {
namespace {

// Removes the segment when the test ends.
struct Named {
  std::string name = testing::UniqueShmName("segment");
  ~Named() { Segment::Remove(name); }
};

TEST_CASE("a segment is created mode 0600 with a header others can attach to") {
  Named n;
  Result<Segment> created = Segment::Create(n.name, {2, 3, 64, 16 << 20});
  REQUIRE_MESSAGE(created.ok(), (created.ok() ? "" : created.error().message));
  struct stat st {};
  REQUIRE(::stat(("/dev/shm/" + n.name).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  Result<Segment> attached = Segment::Attach(n.name);
  REQUIRE(attached.ok());
  CHECK(attached->num_slots() == 5);
  CHECK(attached->WorkerSlot(0) == 2);
  CHECK(attached->num_rings() == 2 * 2 * 3 + 5);
  CHECK(attached->partition_bytes() % 256 == 0);
  CHECK(attached->ring(attached->SubmissionRing(1, 2)).producer_slot == 1);
  CHECK(attached->ring(attached->SubmissionRing(1, 2)).consumer_slot == 4);
  CHECK(attached->ring(attached->CompletionRing(2, 1)).producer_slot == 4);
  CHECK(attached->ring(attached->ControlRing(3)).consumer_slot == 3);
  CHECK(attached->slot(0).generation.load() == 1);
  // Both mappings see the same bytes.
  created->partition(4)[10] = 42;
  CHECK(attached->partition(4)[10] == 42);
  // Partitions follow each other and the last ends inside the segment.
  CHECK(attached->partition(1).data() ==
        attached->partition(0).data() + attached->partition_bytes());
  const uint8_t* base = reinterpret_cast<const uint8_t*>(&attached->header());
  CHECK(attached->partition(4).data() + attached->partition_bytes() <=
        base + attached->header().total_bytes);
}

TEST_CASE("a stale segment of the same name never blocks a new start") {
  Named n;
  {
    Result<Segment> crashed = Segment::Create(n.name, {1, 1, 64, 4 << 20});
    REQUIRE(crashed.ok());
    crashed->slot(0).generation.store(99);
  }  // Unmapped but never removed, as after a crash.
  Result<Segment> fresh = Segment::Create(n.name, {1, 1, 64, 4 << 20});
  REQUIRE(fresh.ok());
  CHECK(fresh->slot(0).generation.load() == 1);
}

TEST_CASE("attaching to another layout version or a foreign segment is a clear error") {
  Named n;
  Result<Segment> created = Segment::Create(n.name, {1, 1, 64, 4 << 20});
  REQUIRE(created.ok());
  const_cast<SegmentHeaderData&>(created->header()).layout_version = 7;
  Result<Segment> attached = Segment::Attach(n.name);
  REQUIRE_FALSE(attached.ok());
  CHECK(attached.error().message.find("layout version 7, this build speaks 2") !=
        std::string::npos);
  const_cast<SegmentHeaderData&>(created->header()).layout_version = kLayoutVersion;
  const_cast<SegmentHeaderData&>(created->header()).magic = 1;
  CHECK(Segment::Attach(n.name).error().message.find("bad magic") != std::string::npos);
  const_cast<SegmentHeaderData&>(created->header()).magic = kMagic;
  const_cast<SegmentHeaderData&>(created->header()).partition_bytes += 256;
  CHECK(Segment::Attach(n.name).error().message.find("does not match") != std::string::npos);
  const_cast<SegmentHeaderData&>(created->header()).partition_bytes -= 256;
  const_cast<SegmentHeaderData&>(created->header()).ring_capacity = 100;
  CHECK(Segment::Attach(n.name).error().message.find("does not match") != std::string::npos);
  const_cast<SegmentHeaderData&>(created->header()).ring_capacity = 64;
  const_cast<SegmentHeaderData&>(created->header()).hookhosts = 0x80000000u;
  const_cast<SegmentHeaderData&>(created->header()).workers = 0x80000001u;  // Sums to 1 in 32 bits.
  CHECK(Segment::Attach(n.name).error().message.find("does not match") != std::string::npos);
  CHECK(Segment::Attach(n.name + "-absent").error().code == ErrorCode::kNotFound);
}

TEST_CASE("layouts that cannot work are refused") {
  Named n;
  CHECK(Segment::Create(n.name, {0, 1, 64, 4 << 20}).error().code == ErrorCode::kInvalidArgument);
  CHECK(Segment::Create(n.name, {1, 1, 100, 4 << 20}).error().message.find("power of two") !=
        std::string::npos);
  CHECK(Segment::Create(n.name, {8, 8, 1024, 4 << 20}).error().message.find("shm_size") !=
        std::string::npos);
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
  RingData& completions = segment.ring(segment.CompletionRing(0, 0));
  completions.tail.store(5);  // Five completions waiting for the dead hook host.
  CHECK(ResetSlot(segment, 0) == 2);
  CHECK(segment.slot(0).generation.load() == 2);
  CHECK(ReadArenaStats(segment, 0).bytes_in_use == 0);
  CHECK(completions.head.load() == 5);
  CHECK(IsCurrent(segment, 0, 2));
  CHECK_FALSE(IsCurrent(segment, 0, 1));
  // The worker's own ring state is untouched.
  CHECK(segment.slot(1).generation.load() == 1);
}

}  // namespace
}  // namespace ferry::shm
