#include "worker/backends/weight_cache.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace ferry {
namespace {

constexpr uint64_t kKiB = 1024;

// A cache over a host arena whose loaders write a byte pattern and count uploads.
struct Fixture {
  explicit Fixture(uint64_t capacity, ResidencyMode mode = ResidencyMode::kManaged,
                   int64_t compaction_interval = 0)
      : arena(capacity), cache(&arena, mode, compaction_interval) {}

  void Add(int index, uint64_t bytes, Residency floor) {
    cache.Register(index, "m" + std::to_string(index), bytes, floor,
                   [this, index, bytes](uint64_t offset) {
                     ++uploads[index];
                     std::memset(arena.Bytes(offset, bytes).data(), index + 1, bytes);
                     return OkStatus();
                   });
  }
  // The bytes in the arena where the model sits are its own.
  bool Intact(int index, uint64_t bytes) {
    std::span<uint8_t> b = arena.Bytes(cache.offset(index), bytes);
    return std::all_of(b.begin(), b.end(), [&](uint8_t v) { return v == index + 1; });
  }

  HostWeightArena arena;
  WeightCache cache;
  std::map<int, int> uploads;
};

TEST_CASE("pinned and warm models load at start; on_demand waits for first use") {
  Fixture f(100 * kKiB);
  f.Add(0, 20 * kKiB, Residency::kPinned);
  f.Add(1, 20 * kKiB, Residency::kWarm);
  f.Add(2, 20 * kKiB, Residency::kOnDemand);
  REQUIRE(f.cache.LoadAtStart().ok());
  CHECK(f.cache.resident(0));
  CHECK(f.cache.resident(1));
  CHECK_FALSE(f.cache.resident(2));
  Result<double> load = f.cache.Acquire(2);
  REQUIRE(load.ok());
  CHECK(f.cache.resident(2));
  CHECK(f.uploads[2] == 1);
  CHECK(f.cache.Acquire(2).value() == 0.0);  // Resident: no load, no load time.
  CHECK(f.uploads[2] == 1);
  CHECK(f.Intact(2, 20 * kKiB));
}

TEST_CASE("a pinned model that cannot fit fails the start, naming it") {
  Fixture f(16 * kKiB);
  f.Add(0, 20 * kKiB, Residency::kPinned);
  Status start = f.cache.LoadAtStart();
  REQUIRE_FALSE(start.ok());
  CHECK(start.error().message.find("pinned model 'm0'") != std::string::npos);
}

TEST_CASE("on_demand models are evicted least recently used, pinned never, warm last") {
  Fixture f(80 * kKiB);
  f.Add(0, 40 * kKiB, Residency::kPinned);
  f.Add(1, 20 * kKiB, Residency::kWarm);
  f.Add(2, 20 * kKiB, Residency::kOnDemand);
  f.Add(3, 20 * kKiB, Residency::kOnDemand);
  f.Add(4, 20 * kKiB, Residency::kOnDemand);
  f.Add(5, 40 * kKiB, Residency::kOnDemand);
  REQUIRE(f.cache.LoadAtStart().ok());  // 40 + 20 of 80.
  REQUIRE(f.cache.Acquire(2).ok());     // Full.
  REQUIRE(f.cache.Acquire(3).ok());     // Evicts 2, the only on_demand model; warm 1 stays.
  CHECK_FALSE(f.cache.resident(2));
  CHECK(f.cache.resident(1));
  REQUIRE(f.cache.Acquire(1).ok());  // Warm 1 becomes the most recently used...
  REQUIRE(f.cache.Acquire(4).ok());  // ...yet on_demand 3 goes first.
  CHECK_FALSE(f.cache.resident(3));
  CHECK(f.cache.resident(1));
  REQUIRE(f.cache.Acquire(5).ok());  // 40 KiB: evicts on_demand 4, then warm 1.
  CHECK_FALSE(f.cache.resident(4));
  CHECK_FALSE(f.cache.resident(1));
  CHECK(f.cache.resident(0));     // Pinned: never evicted,
  CHECK(f.Intact(0, 40 * kKiB));  // and its bytes never touched.
  CHECK(f.Intact(5, 40 * kKiB));
  CHECK(f.cache.stats().evictions == 4);
}

TEST_CASE("among on_demand models the least recently used goes first") {
  Fixture f(60 * kKiB);
  for (int i = 0; i < 4; ++i) {
    f.Add(i, 20 * kKiB, Residency::kOnDemand);
  }
  REQUIRE(f.cache.Acquire(0).ok());
  REQUIRE(f.cache.Acquire(1).ok());
  REQUIRE(f.cache.Acquire(2).ok());
  REQUIRE(f.cache.Acquire(0).ok());  // 1 is now the least recent.
  REQUIRE(f.cache.Acquire(3).ok());
  CHECK_FALSE(f.cache.resident(1));
  CHECK(f.cache.resident(0));
  CHECK(f.cache.resident(2));
}

TEST_CASE("a model larger than the arena, or than the room beside pinned ones, is refused") {
  Fixture f(100 * kKiB);
  f.Add(0, 80 * kKiB, Residency::kPinned);
  f.Add(1, 30 * kKiB, Residency::kOnDemand);
  f.Add(2, 200 * kKiB, Residency::kOnDemand);
  REQUIRE(f.cache.LoadAtStart().ok());
  CHECK(f.cache.Acquire(1).error().message.find("do not fit beside the pinned models") !=
        std::string::npos);
  CHECK(f.cache.Acquire(2).error().message.find("exceed the weight arena") != std::string::npos);
  CHECK(f.cache.resident(0));
}

TEST_CASE("load time is reported apart and a failed upload leaves nothing resident") {
  HostWeightArena arena(64 * kKiB);
  WeightCache cache(&arena, ResidencyMode::kManaged, 0);
  cache.Register(0, "broken", 8 * kKiB, Residency::kOnDemand,
                 [](uint64_t) { return Internal("upload failed"); });
  cache.Register(1, "slow", 8 * kKiB, Residency::kOnDemand, [](uint64_t) {
    volatile double x = 0;
    for (int i = 0; i < 200000; ++i) {
      x = x + i;
    }
    return OkStatus();
  });
  CHECK(cache.Acquire(0).error().message == "upload failed");
  CHECK_FALSE(cache.resident(0));
  CHECK(arena.in_use() == 0);
  Result<double> seconds = cache.Acquire(1);
  REQUIRE(seconds.ok());
  CHECK(*seconds > 0);
  CHECK(cache.stats().load_seconds == doctest::Approx(*seconds));
  // A second load reports its own time, not the total so far.
  cache.Register(2, "slow2", 8 * kKiB, Residency::kOnDemand, [](uint64_t) {
    volatile double x = 0;
    for (int i = 0; i < 200000; ++i) {
      x = x + i;
    }
    return OkStatus();
  });
  Result<double> second = cache.Acquire(2);
  REQUIRE(second.ok());
  CHECK(*second > 0);
  CHECK(cache.stats().load_seconds == doctest::Approx(*seconds + *second));
}

TEST_CASE("every pinned and warm model loads at start, wherever it is registered") {
  Fixture f(100 * kKiB);
  f.Add(0, 10 * kKiB, Residency::kOnDemand);
  f.Add(1, 10 * kKiB, Residency::kPinned);
  f.Add(2, 10 * kKiB, Residency::kPinned);
  f.Add(3, 10 * kKiB, Residency::kWarm);
  f.Add(4, 10 * kKiB, Residency::kWarm);
  REQUIRE(f.cache.LoadAtStart().ok());
  CHECK_FALSE(f.cache.resident(0));
  for (int i = 1; i <= 4; ++i) {
    CAPTURE(i);
    CHECK(f.cache.resident(i));
  }
}

TEST_CASE("a load counts as a use: the model loaded longest ago is evicted first") {
  Fixture f(40 * kKiB);
  for (int i = 0; i < 3; ++i) {
    f.Add(i, 20 * kKiB, Residency::kOnDemand);
  }
  REQUIRE(f.cache.Acquire(1).ok());  // Loaded first (the higher index).
  REQUIRE(f.cache.Acquire(0).ok());
  REQUIRE(f.cache.Acquire(2).ok());  // Needs one of them out: 1, the older load.
  CHECK_FALSE(f.cache.resident(1));
  CHECK(f.cache.resident(0));
  CHECK(f.cache.resident(2));
}

TEST_CASE("a victim may sit after the model being loaded") {
  Fixture f(40 * kKiB);
  for (int i = 0; i < 3; ++i) {
    f.Add(i, 20 * kKiB, Residency::kOnDemand);
  }
  REQUIRE(f.cache.Acquire(1).ok());
  REQUIRE(f.cache.Acquire(2).ok());
  REQUIRE(f.cache.Acquire(0).ok());  // Index 0 evicts index 1 (the least recent).
  CHECK(f.cache.resident(0));
  CHECK_FALSE(f.cache.resident(1));
  CHECK(f.cache.resident(2));
}

TEST_CASE("fragmented free space is compacted instead of evicting more") {
  Fixture f(100 * kKiB);
  for (int i = 0; i < 4; ++i) {
    f.Add(i, 25 * kKiB, Residency::kOnDemand);
  }
  f.Add(4, 40 * kKiB, Residency::kOnDemand);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(f.cache.Acquire(i).ok());  // [0][1][2][3], full.
  }
  // Free 1 and 3 by hand through the floor API: 50 KiB free in two 25 KiB holes.
  REQUIRE(f.cache.Acquire(0).ok());
  REQUIRE(f.cache.Acquire(2).ok());
  REQUIRE(f.cache.Compact({0, 2}).ok());  // Explicit compact: 1 and 3 dropped, 0 and 2 packed.
  CHECK(f.cache.resident(0));
  CHECK(f.cache.resident(2));
  CHECK_FALSE(f.cache.resident(1));
  CHECK(f.arena.largest_free() == 50 * kKiB);
  uint64_t evictions = f.cache.stats().evictions;
  REQUIRE(f.cache.Acquire(4).ok());  // 40 KiB fits the packed hole: nothing evicted.
  CHECK(f.cache.stats().evictions == evictions);
  CHECK(f.Intact(0, 25 * kKiB));
  CHECK(f.Intact(2, 25 * kKiB));
  CHECK(f.Intact(4, 40 * kKiB));
}

TEST_CASE("when holes add up, loading compacts before it evicts") {
  Fixture f(100 * kKiB);
  f.Add(0, 30 * kKiB, Residency::kOnDemand);
  f.Add(1, 30 * kKiB, Residency::kOnDemand);
  f.Add(2, 30 * kKiB, Residency::kOnDemand);
  f.Add(3, 35 * kKiB, Residency::kOnDemand);
  REQUIRE(f.cache.Acquire(0).ok());
  REQUIRE(f.cache.Acquire(1).ok());
  REQUIRE(f.cache.Acquire(2).ok());
  REQUIRE(f.cache.Acquire(1).ok());  // Recency: 0 oldest, then 2, then 1.
  REQUIRE(f.cache.Acquire(3).ok());  // Evicts 0 (40 KiB free in 2 holes), compacts, fits.
  CHECK_FALSE(f.cache.resident(0));
  CHECK(f.cache.resident(1));
  CHECK(f.cache.resident(2));
  CHECK(f.cache.stats().evictions == 1);
  CHECK(f.cache.stats().compactions == 1);
}

TEST_CASE("compaction_interval compacts every N on-demand loads") {
  Fixture f(100 * kKiB, ResidencyMode::kManaged, 2);
  for (int i = 0; i < 3; ++i) {
    f.Add(i, 10 * kKiB, Residency::kOnDemand);
  }
  REQUIRE(f.cache.Acquire(0).ok());
  CHECK(f.cache.stats().compactions == 0);
  REQUIRE(f.cache.Acquire(1).ok());
  CHECK(f.cache.stats().compactions == 1);
  CHECK(f.cache.resident(0));  // Reloaded after compaction.
  CHECK(f.cache.resident(1));
  CHECK(f.uploads[0] == 2);
}

TEST_CASE("set_residency moves floors only when externally managed") {
  Fixture managed(100 * kKiB);
  managed.Add(0, 10 * kKiB, Residency::kOnDemand);
  CHECK(managed.cache.SetResidency(0, Residency::kPinned).error().code ==
        ErrorCode::kInvalidArgument);
  Fixture external(30 * kKiB, ResidencyMode::kExternal);
  external.Add(0, 20 * kKiB, Residency::kOnDemand);
  external.Add(1, 20 * kKiB, Residency::kOnDemand);
  REQUIRE(external.cache.SetResidency(0, Residency::kPinned).ok());
  CHECK(external.cache.resident(0));  // Loaded at once.
  CHECK(external.cache.Acquire(1).error().code == ErrorCode::kResourceExhausted);
  CHECK(external.cache.resident(0));  // Pinned: never evicted for 1.
  REQUIRE(external.cache.SetResidency(0, Residency::kOnDemand).ok());
  REQUIRE(external.cache.Acquire(1).ok());
  CHECK_FALSE(external.cache.resident(0));
}

TEST_CASE("a model without weights takes no extent and evicts nothing") {
  Fixture f(40 * kKiB);
  f.Add(0, 40 * kKiB, Residency::kOnDemand);  // Fills the arena.
  std::vector<uint64_t> offsets;
  f.cache.Register(1, "reshape-only", 0, Residency::kOnDemand, [&](uint64_t offset) {
    offsets.push_back(offset);
    return OkStatus();
  });
  REQUIRE(f.cache.Acquire(0).ok());
  REQUIRE(f.cache.Acquire(1).ok());
  CHECK(f.cache.resident(0));  // Not evicted for a model that needs no room.
  CHECK(f.cache.resident(1));
  CHECK(offsets == std::vector<uint64_t>{0});
  CHECK(f.arena.in_use() == 40 * kKiB);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST_CASE("a byte budget counts bytes only: no fragmentation, frees by ticket") {
  ByteBudget budget(100);
  std::optional<uint64_t> a = budget.Allocate(40), b = budget.Allocate(40);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a != *b);
  CHECK_FALSE(budget.Allocate(21));
  CHECK_FALSE(budget.Allocate(0));
  budget.Free(*a);
  CHECK(budget.in_use() == 40);
  budget.Free(*a);  // A second free of the same ticket changes nothing.
  budget.Free(12345);
  CHECK(budget.in_use() == 40);
  CHECK(budget.Allocate(60));
  CHECK(budget.in_use() == 100);
}

TEST_CASE("the releaser hears every eviction, compaction and set on_demand; Remove is silent") {
  ByteBudget budget(100);
  WeightCache cache(&budget, ResidencyMode::kManaged, 0);
  std::map<int, int> released;
  for (int i = 0; i < 3; ++i) {
    cache.Register(
        i, "m" + std::to_string(i), 40, Residency::kOnDemand, [](uint64_t) { return OkStatus(); },
        [&released, i] { ++released[i]; });
  }
  REQUIRE(cache.Acquire(0).ok());
  REQUIRE(cache.Acquire(1).ok());
  REQUIRE(cache.Acquire(2).ok());  // Evicts 0, the least recent.
  CHECK(released[0] == 1);
  REQUIRE(cache.Compact({1, 2}).ok());
  CHECK(released[1] == 1);
  CHECK(released[2] == 1);
  CHECK(cache.resident(1));
  cache.Evict(1);
  CHECK(released[1] == 2);
  CHECK_FALSE(cache.resident(1));
  cache.Remove(2);
  CHECK(released[2] == 1);
  CHECK(cache.free_bytes() == 100);
  CHECK_FALSE(cache.Acquire(2).ok());  // Removed: never loaded again.
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST_CASE("a model with work waiting is evicted only after the idle ones of its tier") {
  ByteBudget budget(100);
  WeightCache cache(&budget, ResidencyMode::kManaged, 0);
  std::map<int, int> released;
  for (int i = 0; i < 4; ++i) {
    cache.Register(
        i, "m" + std::to_string(i), 30, i == 2 ? Residency::kWarm : Residency::kOnDemand,
        [](uint64_t) { return OkStatus(); }, [&released, i] { ++released[i]; });
  }
  std::set<int> busy = {0};
  cache.SetHasWork([&busy](int i) { return busy.count(i) != 0; });
  REQUIRE(cache.Acquire(0).ok());
  REQUIRE(cache.Acquire(1).ok());
  REQUIRE(cache.Acquire(2).ok());
  REQUIRE(cache.Acquire(3).ok());  // 0 is least recent but has work: 1 goes.
  CHECK(released[0] == 0);
  CHECK(released[1] == 1);
  REQUIRE(cache.Acquire(1).ok());  // 3, the only idle on_demand one, goes.
  CHECK(released[3] == 1);
  busy = {0, 1};
  REQUIRE(cache.Acquire(3).ok());  // Busy on_demand ones before any warm one: 0, the older.
  CHECK(released[0] == 1);
  CHECK(released[2] == 0);
}

}  // namespace
}  // namespace ferry
