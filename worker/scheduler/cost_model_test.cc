#include "worker/scheduler/cost_model.h"

#include <doctest/doctest.h>

#include <limits>

#include "worker/scheduler/wait_histogram.h"

namespace ferry {
namespace {

TEST_CASE("the cost EMA initialises to the first measurement, then weighs by alpha") {
  CostModel cost(1, 2, 0.2);
  CHECK_FALSE(cost.Seeded(0, 0));
  CHECK(cost.Estimate(0, 0) == CostModel::kDefaultCostSeconds);
  cost.Record(0, 0, 1.0);
  CHECK(cost.Estimate(0, 0) == 1.0);
  cost.Record(0, 0, 2.0);
  CHECK(cost.Estimate(0, 0) == doctest::Approx(1.2));
  CHECK(cost.Estimate(0, 1) == CostModel::kDefaultCostSeconds);  // Pairs are separate.
}

TEST_CASE("the high percentile is the max of the last 10 measurements") {
  CostModel cost(1, 1, 0.2);
  cost.Record(0, 0, 5.0);
  for (int i = 0; i < 9; ++i) {
    cost.Record(0, 0, 1.0);
  }
  CHECK(cost.HighPercentile(0, 0) == 5.0);
  cost.Record(0, 0, 1.0);  // The 5.0 leaves the window.
  CHECK(cost.HighPercentile(0, 0) == 1.0);
}

TEST_CASE("queue-wait percentiles come from a bounded histogram within a bucket") {
  WaitHistogram h;
  CHECK(h.Percentile(0.5) == 0);
  for (int i = 1; i <= 1000; ++i) {
    h.Record(int64_t{i} * 1000);  // 1 us .. 1 ms
  }
  CHECK(h.count() == 1000);
  CHECK(h.Percentile(0.5) == doctest::Approx(500'000).epsilon(0.1));
  CHECK(h.Percentile(0.99) == doctest::Approx(990'000).epsilon(0.1));
  // Prometheus buckets: whole sub-buckets at or below a bound (1/8 octave late at most).
  CHECK(h.CountAtMost(0) == 0);
  CHECK(h.CountAtMost(1'024'000) == 1000);  // A bucket bound: 1 us * 2^10.
  CHECK(h.CountAtMost(1'000'000) >= 940);   // (960, 1024] us straddles 1 ms: counted above it.
  CHECK(h.CountAtMost(100'000) >= 88);
  CHECK(h.CountAtMost(100'000) <= 100);
  CHECK(h.sum_ns() == int64_t{500500} * 1000);
  h.Record(int64_t{1} << 62);  // Far beyond the last bucket: clamped, not lost.
  CHECK(h.count() == 1001);
  h.Record(std::numeric_limits<int64_t>::max());
  CHECK(h.sum_ns() == std::numeric_limits<int64_t>::max());  // Saturates.
}

}  // namespace
}  // namespace ferry
