#include "worker/scheduler/scheduler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace ferry {
namespace {

constexpr Nanos kMs = 1'000'000;

ModelSpec Spec(const std::string& name, std::vector<int64_t> sizes = {1, 8, 32}) {
  ModelSpec spec;
  spec.name = name;
  spec.batch_sizes = std::move(sizes);
  spec.wire_batch_input = "input";
  spec.wire_batch_axis = 1;
  return spec;
}

Scheduler Make(std::vector<ModelSpec> specs, SchedulerConfig config = {},
               SchedulerOptions options = {}) {
  Result<Scheduler> s = Scheduler::Create(std::move(config), std::move(specs), options);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

QueuedRequest Req(Nanos arrival, int64_t rows = 1, std::optional<Nanos> deadline = {},
                  uint64_t payload = 0) {
  QueuedRequest r;
  r.arrival = arrival;
  r.rows = rows;
  r.deadline = deadline;
  r.payload = payload;
  return r;
}

void Push(Scheduler& s, int model, QueuedRequest r) { REQUIRE(s.Enqueue(model, r).ok()); }

// Runs decisions until idle or `limit`, completing each dispatch with cost(model, size).
// Returns the model of each dispatch in order.
template <typename CostFn>
std::vector<int> Drain(Scheduler& s, Nanos& now, CostFn cost, int limit = 100000) {
  std::vector<int> order;
  for (int i = 0; i < limit; ++i) {
    Decision d = s.Next(now);
    if (!d.dispatch.runs()) {
      if (s.queued_requests() == 0) {
        break;
      }
      continue;
    }
    double seconds = cost(d.dispatch.model, d.dispatch.batch_size);
    now += static_cast<Nanos>(seconds * kNanosPerSecond);
    s.Complete(d.dispatch, seconds, now);
    order.push_back(d.dispatch.model);
  }
  return order;
}

TEST_CASE("a full model rejects at once, naming model and depth, without affecting others") {
  SchedulerConfig config;
  config.max_queue_depth = 2;
  Scheduler s = Make({Spec("a"), Spec("b")}, config);
  Push(s, 0, Req(1));
  Push(s, 0, Req(2));
  Status full = s.Enqueue(0, Req(3));
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == ErrorCode::kResourceExhausted);
  CHECK(full.error().message == "model 'a': queue is full (max_queue_depth 2)");
  CHECK(s.Enqueue(1, Req(4)).ok());
  CHECK(s.Metrics(0)[0].rejected == 1);
  CHECK(s.Metrics(0)[0].queue_depth == 2);
}

TEST_CASE("bad requests and registrations are refused with the reason") {
  Scheduler s = Make({Spec("a")});
  CHECK(s.Enqueue(0, Req(0, 0)).error().code == ErrorCode::kInvalidArgument);
  QueuedRequest bad_variant = Req(0);
  bad_variant.variant = 3;
  CHECK(s.Enqueue(0, bad_variant).error().message == "model 'a': no shape variant 3");
  CHECK_FALSE(s.Enqueue(7, Req(0)).ok());
  CHECK_FALSE(Scheduler::Create({}, {Spec("a"), Spec("a")}).ok());
  CHECK_FALSE(Scheduler::Create({}, {Spec("a", {8, 4})}).ok());
  SchedulerConfig config;
  config.models["ghost"] = {};
  CHECK(Scheduler::Create(config, {Spec("a")}).error().message ==
        "scheduler.models.ghost: no such model is loaded");
}

TEST_CASE("fifo serves the model whose oldest request is oldest, ties by name") {
  SchedulerConfig config;
  config.discipline = Discipline::kFifo;
  config.models["b"].weight = 100;  // Ignored under fifo.
  Scheduler s = Make({Spec("b"), Spec("a"), Spec("c")}, config);
  Push(s, 0, Req(5));
  Push(s, 1, Req(5));
  Push(s, 2, Req(3));
  CHECK(s.Next(10).dispatch.model == 2);  // c: oldest.
  CHECK(s.Next(10).dispatch.model == 1);  // a: tie with b at 5, a < b.
  CHECK(s.Next(10).dispatch.model == 0);
  CHECK_FALSE(s.Next(10).dispatch.runs());
}

TEST_CASE("edf serves the soonest deadline; no deadline is least urgent; ties by age, name") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  // Size 1: every request fills its batch, so batching-awareness never defers (tested below).
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1}), Spec("c", {1}), Spec("d", {1})}, config);
  Push(s, 0, Req(1));                // a: no deadline, oldest.
  Push(s, 1, Req(2, 1, 900 * kMs));  // b
  Push(s, 2, Req(3, 1, 500 * kMs));  // c: soonest.
  Push(s, 3, Req(4, 1, 900 * kMs));  // d: ties with b, younger.
  CHECK(s.Next(10).dispatch.model == 2);
  CHECK(s.Next(10).dispatch.model == 1);
  CHECK(s.Next(10).dispatch.model == 3);
  CHECK(s.Next(10).dispatch.model == 0);
}

TEST_CASE(
    "edf is batching-aware: an urgent model that cannot fill half its cap waits while slack "
    "allows") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("urgent", {1, 8, 32}), Spec("heavy", {1, 8, 32})}, config);
  for (int m : {0, 1}) {
    for (int64_t size : {1, 8, 32}) {
      s.SeedCost(m, 0, size, 0.002);  // 2 ms per dispatch at any size.
    }
  }
  Push(s, 0, Req(0, 1, 20 * kMs));  // One row, due at 20 ms.
  for (int i = 0; i < 32; ++i) {
    Push(s, 1, Req(0, 1, 1000 * kMs));
  }
  // Slack at 0: 20 - 2 (its own run) = 18 ms > heavy's 2 ms: heavy runs first.
  Decision first = s.Next(0);
  CHECK(first.dispatch.model == 1);
  s.Complete(first.dispatch, 0.002, 2 * kMs);
  for (int i = 0; i < 32; ++i) {
    Push(s, 1, Req(2 * kMs, 1, 1000 * kMs));
  }
  // At 17 ms the slack (20 - 17 - 2 = 1 ms) no longer covers heavy's 2 ms: urgent runs.
  Decision late = s.Next(17 * kMs);
  CHECK(late.dispatch.model == 0);
  CHECK(late.dispatch.shed.empty());
  // Half the cap queued is a good batch: no waiting then.
  for (int i = 0; i < 16; ++i) {
    Push(s, 0, Req(20 * kMs, 1, 60 * kMs));
  }
  CHECK(s.Next(20 * kMs).dispatch.model == 0);
}

TEST_CASE("edf keeps queues in arrival order: an urgent request deep in a queue does not jump") {
  SchedulerConfig config;
  config.discipline = Discipline::kEdf;
  Scheduler s = Make({Spec("a", {1})}, config);
  Push(s, 0, Req(1, 1, 900 * kMs, 1));
  Push(s, 0, Req(2, 1, 100 * kMs, 2));
  Dispatch first = s.Next(10).dispatch;
  REQUIRE(first.requests.size() == 1);
  CHECK(first.requests[0].payload == 1);
}

TEST_CASE("fair: virtual start tags interleave by weight from the first dispatch") {
  SchedulerConfig config;
  config.models["a"].weight = 1;
  config.models["b"].weight = 3;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  s.SeedCost(0, 0, 1, 0.001);
  s.SeedCost(1, 0, 1, 0.001);
  for (int i = 0; i < 8; ++i) {
    Push(s, 0, Req(1));
    Push(s, 1, Req(2));
  }
  Nanos now = 10;
  std::vector<int> order = Drain(
      s, now, [](int, int64_t) { return 0.001; }, 8);
  // Tags a: 0, 1, 2; b: 0, 1/3, 2/3, 1, ... : a (older), b, b, b, a/b tie at 1 (a older) ...
  CHECK(std::count(order.begin(), order.end(), 1) == 6);
  CHECK(order[0] == 0);
}

TEST_CASE("fair: GPU time follows the weights over a saturated run") {
  SchedulerConfig config;
  config.models["a"].weight = 3;
  config.models["b"].weight = 1;
  config.ema_halflife_seconds = 1;
  config.max_queue_depth = 10000;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  for (int i = 0; i < 4000; ++i) {
    Push(s, 0, Req(i));
    Push(s, 1, Req(i));
  }
  Nanos now = 10000;
  std::vector<int> order = Drain(
      s, now, [](int, int64_t) { return 0.001; }, 2000);
  int a = static_cast<int>(std::count(order.begin() + 200, order.end(), 0));
  double share = static_cast<double>(a) / static_cast<double>(order.size() - 200);
  CHECK(share == doctest::Approx(0.75).epsilon(0.02));
}

TEST_CASE("fair: the recent-compute EMA decays with the configured half-life") {
  SchedulerConfig config;
  config.ema_halflife_seconds = 2;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  Push(s, 0, Req(0));
  Dispatch d = s.Next(0).dispatch;
  s.Complete(d, 1.0, 0);
  Push(s, 1, Req(1));
  d = s.Next(2 * kNanosPerSecond).dispatch;
  REQUIRE(d.model == 1);
  s.Complete(d, 1.0, 2 * kNanosPerSecond);
  // a: 1 s decayed by one half-life = 0.5; b: 1 s. a's fraction = 0.5 / 1.5.
  CHECK(s.Metrics(2 * kNanosPerSecond)[0].recent_compute == doctest::Approx(1.0 / 3));
  // Both decay alike, so fractions hold as time passes.
  CHECK(s.Metrics(20 * kNanosPerSecond)[0].recent_compute == doctest::Approx(1.0 / 3));
}

TEST_CASE("fair: the EMA stays exact over runs far longer than the half-life") {
  SchedulerConfig config;
  config.ema_halflife_seconds = 1;
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
  Nanos t = 0;
  for (int i = 0; i < 3; ++i) {  // Forces the scale to be renormalised (2^256 per epoch).
    t += 300 * kNanosPerSecond;
    Push(s, 0, Req(t));
    s.Complete(s.Next(t).dispatch, 1.0, t);
  }
  Push(s, 1, Req(t));
  Nanos later = t + kNanosPerSecond;
  s.Complete(s.Next(later).dispatch, 1.0, later);
  // a's last second, one half-life old, counts 0.5 against b's 1.
  CHECK(s.Metrics(later)[0].recent_compute == doctest::Approx(1.0 / 3));
}

TEST_CASE("fair: dividing by cost lets a cheap model win an equal fairness edge") {
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})});
  s.SeedCost(0, 0, 1, 0.010);
  s.SeedCost(1, 0, 1, 0.001);
  Push(s, 0, Req(1));
  Push(s, 1, Req(2));
  CHECK(s.Next(10).dispatch.model == 1);
}

TEST_CASE("fair: recency_penalty_cap no longer changes a decision (deprecated)") {
  for (double cap : {1.0, 0.1}) {
    SchedulerConfig config;
    config.recency_penalty_cap = cap;
    config.models["a"].weight = 9;
    config.models["b"].weight = 1;
    Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
    s.SeedCost(0, 0, 1, 0.002);
    s.SeedCost(1, 0, 1, 0.001);
    Push(s, 0, Req(1));
    Push(s, 1, Req(2));
    // Equal start tags: the cheaper next dispatch goes first, whatever the cap.
    CHECK(s.Next(10).dispatch.model == 1);
  }
}

TEST_CASE("fair: coalescing_discount lowers the effective cost of a batch that coalesces") {
  for (double discount : {0.0, 0.1}) {
    SchedulerConfig config;
    config.coalescing_discount = discount;
    Scheduler s = Make({Spec("a", {1, 2}), Spec("b", {1, 2})}, config);
    s.SeedCost(0, 0, 2, 0.0010);  // a would coalesce two requests at size 2.
    s.SeedCost(1, 0, 1, 0.00095);
    Push(s, 0, Req(1));
    Push(s, 0, Req(2));
    Push(s, 1, Req(3));
    CHECK(s.Next(10).dispatch.model == (discount == 0.0 ? 1 : 0));
  }
}

TEST_CASE("fair is work-conserving: idle registered models hand no share to the busy ones") {
  // 2:1:1 busy models with per-dispatch costs 1:10:1 plus five idle models: shares over the
  // busy models must stay 50/25/25 (summing weights over all models gives ~25/62/14).
  SchedulerConfig config;
  config.models["a"].weight = 2;
  config.ema_halflife_seconds = 5;
  std::vector<ModelSpec> specs = {Spec("a", {1}), Spec("b", {1}), Spec("c", {1})};
  for (int i = 0; i < 5; ++i) {
    specs.push_back(Spec("idle" + std::to_string(i), {1}));
  }
  Scheduler s = Make(specs, config);
  double costs[] = {0.001, 0.010, 0.001};
  std::map<int, double> busy;
  Nanos now = 0;
  for (int step = 0; step < 30000; ++step) {
    for (int m = 0; m < 3; ++m) {
      while (s.Metrics(now)[static_cast<size_t>(m)].queue_depth < 2) {
        Push(s, m, Req(now));
      }
    }
    Dispatch d = s.Next(now).dispatch;
    REQUIRE(d.runs());
    double seconds = costs[d.model];
    now += static_cast<Nanos>(seconds * kNanosPerSecond);
    s.Complete(d, seconds, now);
    if (now > 20 * kNanosPerSecond) {
      busy[d.model] += seconds;
    }
  }
  double total = busy[0] + busy[1] + busy[2];
  CHECK(busy[0] / total == doctest::Approx(0.50).epsilon(0.04));
  CHECK(busy[1] / total == doctest::Approx(0.25).epsilon(0.08));
  CHECK(busy[2] / total == doctest::Approx(0.25).epsilon(0.08));
}

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

namespace ferry {
namespace {

QueuedRequest Prio(Nanos arrival, int priority, uint64_t payload) {
  QueuedRequest r = Req(arrival, 1, {}, payload);
  r.priority = priority;
  return r;
}

std::vector<uint64_t> Payloads(Scheduler& s, Nanos now) {
  std::vector<uint64_t> out;
  while (s.queued_requests() > 0) {
    Decision d = s.Next(now);
    for (const QueuedRequest& r : d.dispatch.requests) {
      out.push_back(r.payload);
    }
    if (d.dispatch.runs()) {
      s.Complete(d.dispatch, 0.001, now);
    }
  }
  return out;
}

TEST_CASE("a model's queue runs by priority level, then age; a bad level is refused") {
  Scheduler s = Make({Spec("a", {1})});
  Push(s, 0, Prio(1, kLowestPriority, 10));
  Push(s, 0, Prio(2, kDefaultPriority, 20));
  Push(s, 0, Prio(3, kHighestPriority, 30));
  Push(s, 0, Prio(4, kDefaultPriority, 40));
  Push(s, 0, Prio(5, kHighestPriority, 50));
  CHECK(Payloads(s, 10) == std::vector<uint64_t>{30, 50, 20, 40, 10});
  CHECK(s.Enqueue(0, Prio(6, 0, 1)).error().message ==
        "model 'a': priority 0 is not a level (1..3)");
  CHECK_FALSE(s.Enqueue(0, Prio(6, 4, 1)).ok());
}

TEST_CASE("priority levels never change which model runs next (fifo and fair use the oldest)") {
  for (Discipline discipline : {Discipline::kFifo, Discipline::kFair}) {
    SchedulerConfig config;
    config.discipline = discipline;
    Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
    Push(s, 0, Prio(1, kDefaultPriority, 10));  // a's oldest is the oldest of all...
    Push(s, 1, Prio(5, kDefaultPriority, 20));  // ...b's is next...
    Push(s, 0, Prio(9, kHighestPriority, 30));  // ...and a's urgent one is newest.
    Decision d = s.Next(10);
    CAPTURE(DisciplineName(discipline));
    CHECK(d.dispatch.model == 0);
    REQUIRE(d.dispatch.requests.size() == 1);
    CHECK(d.dispatch.requests[0].payload == 30);  // Inside a: the urgent one first.
  }
}

TEST_CASE("cancel takes a request out of its queue (or the committed calls), once, counted") {
  Scheduler s = Make({Spec("a", {1, 8}), Spec("b", {1})});
  Push(s, 0, Req(1, 1, {}, 1));
  Push(s, 0, Req(2, 1, {}, 2));
  Push(s, 1, Req(3, 1, {}, 3));
  QueuedRequest sub = Req(4, 1, {}, 4);
  sub.meta_id = 9;
  REQUIRE(s.EnqueueCommitted(0, sub).ok());
  CHECK(s.queued_requests() == 4);
  CHECK(s.Cancel(1, 3));               // b's only request: b has no work left.
  CHECK_FALSE(s.Cancel(1, 3));         // Once.
  CHECK_FALSE(s.Cancel(1, 2));         // Not b's.
  CHECK_FALSE(s.Cancel(5, 2));         // No such model.
  CHECK(s.Cancel(0, 4));               // The committed call...
  CHECK_FALSE(s.CommittedPending(9));  // ...and its meta may commit again.
  CHECK(s.queued_requests() == 2);
  Decision d = s.Next(10);
  CHECK(d.dispatch.model == 0);
  CHECK(d.dispatch.requests.size() == 2);
  CHECK_FALSE(s.Cancel(0, 1));  // Dispatched: too late.
  s.Complete(d.dispatch, 0.001, 10);
  CHECK_FALSE(s.Next(11).dispatch.runs());
  CHECK(s.Metrics(11)[0].cancelled == 1);
  CHECK(s.Metrics(11)[1].cancelled == 1);
  CHECK(s.Metrics(11)[1].queue_depth == 0);
}

}  // namespace
}  // namespace ferry
