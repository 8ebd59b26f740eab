#include "worker/scheduler/batch_planner.h"

#include <doctest/doctest.h>

namespace ferry {
namespace {

ModelSpec Spec(std::vector<int64_t> sizes, std::optional<int64_t> cap = {}) {
  ModelSpec spec;
  spec.name = "m";
  spec.batch_sizes = std::move(sizes);
  spec.num_variants = 2;
  spec.config.max_batch_size = cap;
  return spec;
}

ModelQueue Queue(std::vector<int64_t> rows, std::vector<int> variants = {}) {
  ModelQueue q;
  for (size_t i = 0; i < rows.size(); ++i) {
    QueuedRequest r;
    r.rows = rows[i];
    r.variant = variants.empty() ? 0 : variants[i];
    r.payload = i;
    q.Push(r);
  }
  return q;
}

BatchPlan Plan(const ModelQueue& q, const ModelSpec& spec,
               BatchSizing sizing = BatchSizing::kLargest, bool coalesce = true) {
  CostModel cost(spec.num_variants, static_cast<int>(spec.batch_sizes.size()), 0.2);
  return PlanBatch(q, spec, cost, sizing, coalesce);
}

TEST_CASE("every queued row up to the cap is taken, padded to the smallest size holding it") {
  ModelSpec spec = Spec({1, 8, 32});
  BatchPlan ten = Plan(Queue(std::vector<int64_t>(10, 1)), spec);
  CHECK(ten.batch_size == 32);
  CHECK(ten.count == 10);
  // Whole requests summing to 30 of 32 run at 32, not at 8 (a prefix rule would take 6 rows).
  BatchPlan threes = Plan(Queue(std::vector<int64_t>(20, 3)), spec);
  CHECK(threes.rows == 30);
  CHECK(threes.count == 10);
  CHECK(threes.batch_size == 32);
  BatchPlan many = Plan(Queue(std::vector<int64_t>(100, 1)), spec);
  CHECK(many.batch_size == 32);
  CHECK(many.count == 32);
}

TEST_CASE("a partial fill pads up to the smallest compiled size") {
  BatchPlan plan = Plan(Queue({1, 2}), Spec({4, 16}));
  CHECK(plan.count == 2);
  CHECK(plan.rows == 3);
  CHECK(plan.batch_size == 4);
}

TEST_CASE("requests of the front's variant coalesce past others, which stay queued") {
  BatchPlan plan = Plan(Queue({1, 1, 1, 1, 1}, {0, 0, 1, 0, 0}), Spec({1, 2, 4}));
  CHECK(plan.count == 4);
  CHECK(plan.picks == std::vector<size_t>{0, 1, 3, 4});
  CHECK(plan.batch_size == 4);
}

TEST_CASE("a request with no compiled program dispatches alone with the shape error") {
  BatchPlan plan = Plan(Queue({1, 1}, {kNoCompiledProgram, 0}), Spec({1, 2}));
  CHECK(plan.count == 1);
  REQUIRE(plan.failure.has_value());
  CHECK(plan.failure->message == "model 'm': no compiled program for input shape");
}

TEST_CASE("models that cannot coalesce serve one request per dispatch") {
  ModelSpec spec = Spec({1, 8});
  spec.coalescable = false;
  BatchPlan plan = Plan(Queue({3, 1, 1}), spec);
  CHECK(plan.count == 1);
  CHECK(plan.batch_size == 8);
  BatchPlan unbatched = Plan(Queue({1, 1}), Spec({0}));
  CHECK(unbatched.count == 1);
  CHECK(unbatched.batch_size == 0);
}

TEST_CASE("max_batch_size caps the rows but never the compiled shapes") {
  ModelSpec spec = Spec({4, 16}, 6);
  BatchPlan plan = Plan(Queue(std::vector<int64_t>(20, 1)), spec);
  CHECK(plan.rows == 6);         // A cap that is not a compiled size coalesces up to it ...
  CHECK(plan.batch_size == 16);  // ... and pads to the next compiled size.
  BatchPlan seven = Plan(Queue(std::vector<int64_t>(20, 1)), Spec({1, 8, 32}, 7));
  CHECK(seven.rows == 7);
  CHECK(seven.batch_size == 8);
  ModelSpec tiny = Spec({4, 16}, 2);
  BatchPlan padded = Plan(Queue(std::vector<int64_t>(20, 1)), tiny);
  CHECK(padded.rows == 2);
  CHECK(padded.batch_size == 4);  // Still a compiled size: padded.
  CHECK(EffectiveMaxBatch(tiny) == 2);
}

TEST_CASE("an indivisible request over the cap dispatches alone at the smallest size fitting it") {
  ModelSpec spec = Spec({1, 8, 32}, 8);
  BatchPlan plan = Plan(Queue({20, 1, 1}), spec);
  CHECK(plan.count == 1);
  CHECK(plan.rows == 20);
  CHECK(plan.batch_size == 32);
  CHECK_FALSE(plan.failure.has_value());
  BatchPlan too_big = Plan(Queue({40}), Spec({1, 8, 32}));
  REQUIRE(too_big.failure.has_value());
  CHECK(too_big.failure->message ==
        "model 'm': request of 40 rows exceeds the largest compiled batch size 32");
}

TEST_CASE("the front request is always taken, so the oldest makes progress") {
  // Behind a 7-row front request, one-row requests cannot push it out of the batch.
  BatchPlan plan = Plan(Queue({7, 1, 1, 1, 1}), Spec({1, 8}));
  CHECK(plan.count == 2);
  CHECK(plan.rows == 8);
  BatchPlan big_front = Plan(Queue({6, 3}), Spec({4, 8}));
  CHECK(big_front.count == 1);
  CHECK(big_front.rows == 6);
  CHECK(big_front.batch_size == 8);
  // When the front forces size 8, the rows after it that fit ride along.
  BatchPlan fills = Plan(Queue({6, 1, 1, 5}), Spec({4, 8}));
  CHECK(fills.count == 3);
  CHECK(fills.rows == 8);
  CHECK(fills.batch_size == 8);
}

TEST_CASE("cost sizing pads 3 rows to 4 instead of three dispatches of 1") {
  ModelSpec spec = Spec({1, 4});
  CostModel cost(2, 2, 0.2);
  cost.Record(0, 0, 0.0010);
  cost.Record(0, 1, 0.0012);
  ModelQueue q = Queue({1, 1, 1});
  BatchPlan largest = PlanBatch(q, spec, cost, BatchSizing::kLargest, true);
  CHECK(largest.batch_size == 4);  // largest always fills and pads.
  BatchPlan by_cost = PlanBatch(q, spec, cost, BatchSizing::kCost, true);
  CHECK(by_cost.batch_size == 4);
  CHECK(by_cost.count == 3);
  // When padding is dear, cost sizing stays small.
  CostModel dear(2, 2, 0.2);
  dear.Record(0, 0, 0.0010);
  dear.Record(0, 1, 0.0100);
  CHECK(PlanBatch(q, spec, dear, BatchSizing::kCost, true).batch_size == 1);
}

TEST_CASE("without coalescing each request is its own dispatch") {
  BatchPlan plan = Plan(Queue({1, 1, 1}), Spec({1, 8}), BatchSizing::kLargest, false);
  CHECK(plan.count == 1);
  CHECK(plan.batch_size == 1);
}

}  // namespace
}  // namespace ferry
