// The scheduler's disciplines: admission, fifo, edf, fair by weight and cost, and priority
// levels within a model's queue.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "worker/scheduler/scheduler_testing.h"

namespace ferry {
namespace {

using namespace ferry::testing;

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
