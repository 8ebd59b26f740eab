// The scheduler at work: shedding, committed sub-calls, live settings, cost learning, warm-up,
// metrics and the baselines.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "worker/scheduler/scheduler_testing.h"

namespace ferry {
namespace {

using namespace ferry::testing;

TEST_CASE("expired requests are shed before GPU work under every discipline") {
  for (Discipline discipline : {Discipline::kFair, Discipline::kFifo, Discipline::kEdf}) {
    SchedulerConfig config;
    config.discipline = discipline;
    Scheduler s = Make({Spec("a", {1, 8})}, config);
    Push(s, 0, Req(1, 1, 50 * kMs, 1));
    Push(s, 0, Req(2, 1, 500 * kMs, 2));
    Dispatch d = s.Next(100 * kMs).dispatch;
    REQUIRE(d.shed.size() == 1);
    CHECK(d.shed[0].payload == 1);
    REQUIRE(d.requests.size() == 1);
    CHECK(d.requests[0].payload == 2);
    CHECK(s.Metrics(0)[0].shed == 1);
  }
}

TEST_CASE("edf sheds by laxity against the learned high percentile; others do not") {
  for (Discipline discipline : {Discipline::kEdf, Discipline::kFifo}) {
    SchedulerConfig config;
    config.discipline = discipline;
    Scheduler s = Make({Spec("a", {1})}, config);
    // Mean about 2.8 ms but one 10 ms outlier in the window: the max decides.
    for (double seconds : {0.001, 0.010, 0.001, 0.001}) {
      s.SeedCost(0, 0, 1, seconds);
    }
    CHECK(s.cost(0).Estimate(0, 0) < 0.005);
    Push(s, 0, Req(0, 1, 5 * kMs, 1));  // Cannot finish in 5 ms at the 10 ms high.
    Push(s, 0, Req(0, 1, 50 * kMs, 2));
    Dispatch d = s.Next(0).dispatch;
    if (discipline == Discipline::kEdf) {
      REQUIRE(d.shed.size() == 1);
      CHECK(d.shed[0].payload == 1);
      CHECK(d.requests[0].payload == 2);
    } else {
      CHECK(d.shed.empty());
      CHECK(d.requests[0].payload == 1);
    }
  }
}

TEST_CASE(
    "a dispatch carries the slowest recent run at its size, -1 before any, every discipline") {
  for (Discipline discipline : {Discipline::kFair, Discipline::kFifo, Discipline::kEdf}) {
    CAPTURE(discipline);
    SchedulerConfig config;
    config.discipline = discipline;
    Scheduler s = Make({Spec("a", {1, 8})}, config);
    Push(s, 0, Req(0, 1, {}, 1));
    Dispatch d = s.Next(0).dispatch;
    REQUIRE(d.runs());
    CHECK(d.worst_recent_seconds == -1);  // Size 1 has not run.
    s.Complete(d, 0.0002, 1 * kMs);
    for (double seconds : {0.0001, 0.003, 0.0001}) {
      s.SeedCost(0, 0, 1, seconds);
    }
    s.SeedCost(0, 0, 8, 0.0005);
    Push(s, 0, Req(0, 1, {}, 2));
    d = s.Next(2 * kMs).dispatch;
    REQUIRE(d.batch_size == 1);
    CHECK(d.worst_recent_seconds == doctest::Approx(0.003));  // Not the mean: the slowest.
    s.Complete(d, 0.0001, 3 * kMs);
    for (int k = 2; k < 4; ++k) {
      Push(s, 0, Req(0, 1, {}, static_cast<uint64_t>(k)));
    }
    d = s.Next(4 * kMs).dispatch;
    REQUIRE(d.batch_size == 8);  // Two rows, padded to 8: size 8's runs count.
    CHECK(d.worst_recent_seconds == doctest::Approx(0.0005));
  }
}

TEST_CASE("edf laxity is a no-op for an unseeded model") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1})}, config);
  Push(s, 0, Req(0, 1, 1 * kMs));  // 1 ms of slack beats the small default cost.
  Dispatch d = s.Next(0).dispatch;
  CHECK(d.shed.empty());
  CHECK(d.runs());
}

TEST_CASE("when nothing is feasible the execution is skipped") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1, 8})}, config);
  Push(s, 0, Req(0, 1, 1 * kMs));
  Push(s, 0, Req(0, 1, 2 * kMs));
  Dispatch d = s.Next(5 * kMs).dispatch;
  CHECK_FALSE(d.runs());
  CHECK(d.shed.size() == 2);
  CHECK(s.queued_requests() == 0);
}

TEST_CASE("edf: a learned cost that no queued deadline can meet skips the execution") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1, 8})}, config);
  s.SeedCost(0, 0, 1, 0.010);
  s.SeedCost(0, 0, 8, 0.010);
  Push(s, 0, Req(0, 1, 4 * kMs));  // Live deadlines, but both inside the 10 ms cost.
  Push(s, 0, Req(0, 1, 6 * kMs));
  Dispatch d = s.Next(1 * kMs).dispatch;
  CHECK_FALSE(d.runs());
  CHECK(d.shed.size() == 2);
}

TEST_CASE("after shedding, the batch is planned again from what is left") {
  Scheduler s = Make({Spec("a", {1, 2, 4})});
  Push(s, 0, Req(0, 1, 1 * kMs, 1));  // Expired by the time the GPU frees.
  for (uint64_t p = 2; p <= 5; ++p) {
    Push(s, 0, Req(0, 1, std::nullopt, p));
  }
  Dispatch d = s.Next(2 * kMs).dispatch;
  REQUIRE(d.shed.size() == 1);
  REQUIRE(d.requests.size() == 4);  // The next four fill size 4.
  CHECK(d.requests[0].payload == 2);
  CHECK(d.batch_size == 4);
}

TEST_CASE("edf: an expired request deep in a queue does not hold its model on top") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  for (int i = 0; i < 5; ++i) {
    Push(s, 0, Req(i));  // No deadlines...
  }
  Push(s, 0, Req(5, 1, 1 * kMs));   // ...then one that expires.
  Push(s, 1, Req(6, 1, 50 * kMs));  // b's live deadline is the most urgent one.
  CHECK(s.Next(2 * kMs).dispatch.model == 1);
}

TEST_CASE("a split request is queued whole or not at all") {
  SchedulerConfig config;
  config.max_queue_depth = 4;
  Scheduler s = Make({Spec("a")}, config);
  Push(s, 0, Req(0));
  std::vector<QueuedRequest> pieces(4, Req(1, 32));
  CHECK(s.EnqueueAll(0, pieces).error().code == ErrorCode::kResourceExhausted);
  CHECK(s.queue_depth(0) == 1);  // No piece slipped in.
  pieces.pop_back();
  CHECK(s.EnqueueAll(0, pieces).ok());
  CHECK(s.queue_depth(0) == 4);
}

TEST_CASE("committed sub-calls are checked like any request") {
  Scheduler s = Make({Spec("a")});
  QueuedRequest bad = Req(0, 0);
  bad.meta_id = 1;
  CHECK(s.EnqueueCommitted(0, bad).error().code == ErrorCode::kInvalidArgument);
  bad.rows = 1;
  bad.variant = 5;
  CHECK(s.EnqueueCommitted(0, bad).error().message == "model 'a': no shape variant 5");
  CHECK_FALSE(s.EnqueueCommitted(3, bad).ok());
}

TEST_CASE("settings built in code are checked: no NaN or zero weight reaches the arithmetic") {
  SchedulerConfig zero;
  zero.models["a"].weight = 0;
  CHECK_FALSE(Scheduler::Create(zero, {Spec("a")}).ok());
  SchedulerConfig nan;
  nan.models["a"].weight = std::nan("");
  CHECK_FALSE(Scheduler::Create(nan, {Spec("a")}).ok());
  SchedulerConfig halflife;
  halflife.ema_halflife_seconds = 0;
  CHECK_FALSE(Scheduler::Create(halflife, {Spec("a")}).ok());
}

TEST_CASE("an unbatched model's single request is a pass-through") {
  Scheduler s = Make({Spec("u", {0})});
  Push(s, 0, Req(0));
  Push(s, 0, Req(1));
  Dispatch d = s.Next(10).dispatch;
  CHECK(d.requests.size() == 1);  // Never coalesced.
  CHECK(d.batch_size == 0);
  CHECK(d.pass_through);
}

TEST_CASE("the coalescing discount applies only when a second request would really join") {
  for (bool can_join : {false, true}) {
    SchedulerConfig config;
    config.coalescing_discount = 0.5;
    ModelSpec a = Spec("a", can_join ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1});
    Scheduler s = Make({a, Spec("b", {1})}, config);
    s.SeedCost(0, 0, 1, 0.0010);
    if (can_join) {
      s.SeedCost(0, 0, 2, 0.0010);
    }
    s.SeedCost(1, 0, 1, 0.0009);
    Push(s, 0, Req(1));
    Push(s, 0, Req(2));
    Push(s, 1, Req(3));
    // a at 1 ms wins only when its two requests coalesce (0.5 ms effective).
    CHECK(s.Next(10).dispatch.model == (can_join ? 0 : 1));
  }
}

TEST_CASE("a committed meta sub-call jumps the scan, after control commands, one per meta") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  Push(s, 0, Req(0, 1, 1 * kMs));  // More urgent regular work.
  QueuedRequest sub = Req(5, 1, 900 * kMs, 42);
  sub.meta_id = 7;
  REQUIRE(s.EnqueueCommitted(1, sub).ok());
  QueuedRequest second = sub;
  CHECK(s.EnqueueCommitted(1, second).error().message ==
        "scheduler: meta 7 already has a committed sub-call pending");
  REQUIRE(s.SetPolicy("a", 5).ok());
  Decision d = s.Next(0);
  REQUIRE(d.controls.size() == 1);  // Applied first, in the same decision.
  CHECK(d.dispatch.committed_meta);
  CHECK(d.dispatch.model == 1);
  CHECK(d.dispatch.requests[0].payload == 42);
  CHECK(s.Next(0).dispatch.model == 0);       // Then the scan.
  CHECK(s.EnqueueCommitted(1, second).ok());  // The meta may commit its next sub-call.
}

TEST_CASE("committed sub-calls skip laxity but not the hard deadline") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1})}, config);
  s.SeedCost(0, 0, 1, 0.010);
  QueuedRequest sub = Req(0, 1, 5 * kMs, 1);
  sub.meta_id = 1;
  REQUIRE(s.EnqueueCommitted(0, sub).ok());
  Dispatch d = s.Next(0).dispatch;  // 10 ms cost > 5 ms slack, but committed: runs.
  CHECK(d.runs());
  sub.meta_id = 2;
  REQUIRE(s.EnqueueCommitted(0, sub).ok());
  d = s.Next(6 * kMs).dispatch;  // Past its deadline: shed.
  CHECK_FALSE(d.runs());
  CHECK(d.shed.size() == 1);
}

TEST_CASE("set_policy changes the live weight before the next selection") {
  SchedulerConfig config;
  config.recency_penalty_cap = 1.0;  // So the shares, not the cap, decide.
  config.models["b"].weight = 3;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  Push(s, 0, Req(1));
  Push(s, 1, Req(2));
  REQUIRE(s.SetPolicy("a", 10).ok());
  CHECK(s.Next(10).dispatch.model == 0);
  CHECK(s.GetControlStatus().models[0].weight == 10);
  CHECK(s.SetPolicy("zzz", 1).error().code == ErrorCode::kNotFound);
  CHECK(s.SetPolicy("a", 0).error().code == ErrorCode::kInvalidArgument);
}

TEST_CASE("set_residency works only in externally-managed mode") {
  Scheduler managed = Make({Spec("a")});
  CHECK(managed.SetResidency("a", Residency::kPinned).error().code == ErrorCode::kInvalidArgument);
  SchedulerConfig config;
  config.residency_mode = ResidencyMode::kExternal;
  Scheduler external = Make({Spec("a")}, config);
  REQUIRE(external.SetResidency("a", Residency::kOnDemand).ok());
  CHECK(external.GetControlStatus().models[0].residency == Residency::kWarm);
  Decision d = external.Next(0);
  REQUIRE(d.controls.size() == 1);
  CHECK(d.controls[0].kind == SchedulerChange::Kind::kSetResidency);
  CHECK(external.GetControlStatus().models[0].residency == Residency::kOnDemand);
  REQUIRE(external.Compact({"a"}).ok());
  CHECK(external.Next(0).controls[0].models == std::vector<int>{0});
  CHECK(external.Compact({"b"}).error().code == ErrorCode::kNotFound);
}

TEST_CASE("a reload's residency floor applies only in managed mode, from the next decision") {
  Scheduler managed = Make({Spec("a")});
  REQUIRE(managed.SetResidencyFloor("a", Residency::kPinned).ok());
  CHECK(managed.GetControlStatus().models[0].residency == Residency::kWarm);
  (void)managed.Next(0);
  CHECK(managed.GetControlStatus().models[0].residency == Residency::kPinned);
  CHECK(managed.SetResidencyFloor("zzz", Residency::kPinned).error().code == ErrorCode::kNotFound);
  SchedulerConfig config;
  config.residency_mode = ResidencyMode::kExternal;
  Scheduler external = Make({Spec("a")}, config);
  CHECK(external.SetResidencyFloor("a", Residency::kPinned).error().code ==
        ErrorCode::kInvalidArgument);
}

TEST_CASE("cost learning: the EMA starts at the first measurement and follows alpha") {
  SchedulerConfig config;
  config.cost_ema_alpha = 0.5;
  Scheduler s = Make({Spec("a", {1, 8})}, config);
  CHECK_FALSE(s.cost(0).Seeded(0, 1));
  CHECK(s.cost(0).Estimate(0, 1) == CostModel::kDefaultCostSeconds);
  for (int i = 0; i < 8; ++i) {
    Push(s, 0, Req(i));
  }
  Dispatch d = s.Next(10).dispatch;
  REQUIRE(d.batch_size == 8);
  s.Complete(d, 0.004, 20);
  CHECK(s.cost(0).Estimate(0, 1) == doctest::Approx(0.004));
  s.SeedCost(0, 0, 8, 0.002);
  CHECK(s.cost(0).Estimate(0, 1) == doctest::Approx(0.003));
}

TEST_CASE("warm-up under fair covers every (model, variant, compiled size); not under fifo") {
  ModelSpec two = Spec("b", {1, 4});
  two.num_variants = 2;
  Scheduler fair = Make({Spec("a", {1, 8, 32}), two});
  CHECK(fair.WarmupPlan().size() == 3 + 2 * 2);
  SchedulerConfig config;
  config.discipline = Discipline::kFifo;
  CHECK(Make({Spec("a")}, config).WarmupPlan().empty());
}

TEST_CASE("metrics count dispatches, requests, rows, waits and batch sizes") {
  Scheduler s = Make({Spec("a", {1, 8, 32})});
  for (int i = 0; i < 9; ++i) {
    Push(s, 0, Req(0));
  }
  Dispatch d = s.Next(4 * kMs).dispatch;  // All 9, padded to 32, waited 4 ms.
  s.Complete(d, 0.002, 6 * kMs);
  Push(s, 0, Req(5 * kMs));
  d = s.Next(6 * kMs).dispatch;  // 1, waited 1 ms.
  s.Complete(d, 0.001, 7 * kMs);
  Push(s, 0, Req(7 * kMs));
  ModelMetrics m = s.Metrics(7 * kMs)[0];
  CHECK(m.dispatch_count == 2);
  CHECK(m.requests_served == 10);
  CHECK(m.rows_served == 10);
  CHECK(m.padding_rows == 23);
  CHECK(m.total_compute_seconds == doctest::Approx(0.003));
  CHECK(m.queue_depth == 1);
  CHECK(m.queue_wait_p50_ns == doctest::Approx(4 * kMs).epsilon(0.1));
  CHECK(m.queue_wait_p99_ns == doctest::Approx(4 * kMs).epsilon(0.1));
  CHECK(m.batch_size_histogram == std::map<int64_t, uint64_t>{{1, 1}, {32, 1}});
  CHECK(m.effective_max_batch == 32);
  CHECK(m.recent_compute == doctest::Approx(1.0));
  ControlStatus status = s.GetControlStatus();
  CHECK(status.discipline == Discipline::kFair);
  CHECK(status.models[0].wire_batch_input == "input");
  CHECK(status.models[0].wire_batch_axis == 1);
  CHECK(status.models[0].requests_served == 10);
}

TEST_CASE("a burst of 1000 one-row requests takes at most ceil(1000/32)+1 dispatches") {
  Scheduler s = Make({Spec("a", {1, 8, 32})});
  for (int i = 0; i < 1000; ++i) {
    Push(s, 0, Req(0));
  }
  Nanos now = 0;
  std::vector<int> order = Drain(s, now, [](int, int64_t) { return 0.001; });
  CHECK(order.size() <= 33);
  CHECK(s.Metrics(now)[0].rows_served == 1000);
}

TEST_CASE("the no-coalescing baseline serves one request per dispatch") {
  Scheduler s = Make({Spec("a", {1, 8, 32})}, {}, {.coalesce = false});
  for (int i = 0; i < 20; ++i) {
    Push(s, 0, Req(0));
  }
  Nanos now = 0;
  CHECK(Drain(s, now, [](int, int64_t) { return 0.001; }).size() == 20);
}

TEST_CASE("the round-robin baseline visits models with work in turn") {
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1}), Spec("c", {1})}, {}, {.round_robin = true});
  for (int i = 0; i < 2; ++i) {
    Push(s, 0, Req(0));
    Push(s, 2, Req(0));
  }
  Nanos now = 0;
  CHECK(Drain(s, now, [](int, int64_t) { return 0.001; }) == std::vector<int>{0, 2, 0, 2});
}

}  // namespace
}  // namespace ferry
