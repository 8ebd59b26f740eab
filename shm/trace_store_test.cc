// The trace store: spans written by a hook host come out whole and in order; a full ring drops
// the newest (counted); a head that lies never makes ferryd read more than one ring.
#include "shm/trace_store.h"

#include <doctest/doctest.h>

#include "tests/testing/shm_name.h"

namespace ferry::shm {
namespace {

TraceSpanData Span(uint64_t n) {
  TraceSpanData s{};
  s.trace_hi = n;
  s.trace_lo = ~n;
  s.total_ns = static_cast<int64_t>(n);
  return s;
}

TEST_CASE("spans pass from the hook host's mapping to ferryd's, in order") {
  std::string segment = testing::UniqueShmName("trace");
  Result<TraceStore> ferryd = TraceStore::Create(segment, 0);
  REQUIRE(ferryd.ok());
  Result<TraceStore> host = TraceStore::Open(segment, 0);
  REQUIRE(host.ok());
  CHECK(!TraceStore::Open(segment, 1).ok());  // Another hook host's is not there.
  for (uint64_t i = 1; i <= 3; ++i) {
    CHECK(host->Push(Span(i)));
  }
  std::vector<TraceSpanData> got = ferryd->Take();
  REQUIRE(got.size() == 3);
  CHECK(got[0].trace_hi == 1);
  CHECK(got[2].trace_lo == ~uint64_t{3});
  CHECK(ferryd->Take().empty());
  CHECK(ferryd->area().head.load() == 3);
  TraceStore::Remove(segment, 0);
}

TEST_CASE("a full ring drops new spans and counts them") {
  std::string segment = testing::UniqueShmName("trace");
  Result<TraceStore> store = TraceStore::Create(segment, 0);
  REQUIRE(store.ok());
  for (uint64_t i = 0; i < kTraceRingSpans; ++i) {
    REQUIRE(store->Push(Span(i)));
  }
  CHECK(!store->Push(Span(9999)));
  CHECK(store->area().dropped.load() == 1);
  std::vector<TraceSpanData> got = store->Take();
  REQUIRE(got.size() == kTraceRingSpans);
  CHECK(got.back().trace_hi == kTraceRingSpans - 1);  // The dropped one is not there.
  CHECK(store->Push(Span(1)));                        // Room again.
  TraceStore::Remove(segment, 0);
}

TEST_CASE("a head that lies is clamped to one ring") {
  std::string segment = testing::UniqueShmName("trace");
  Result<TraceStore> store = TraceStore::Create(segment, 0);
  REQUIRE(store.ok());
  store->area().head.store(~uint64_t{0} - 5);  // Far ahead of the tail.
  CHECK(store->Take().size() == kTraceRingSpans);
  store->area().head.store(store->area().tail.load() - 3);  // Behind the tail now.
  CHECK(store->Take().size() == kTraceRingSpans);
  CHECK(store->Take().empty());
  TraceStore::Remove(segment, 0);
}

}  // namespace
}  // namespace ferry::shm
