// fair across transitions: the lag bound of docs/scheduler.md checked where the EMA design
// locked models out for seconds (a model joins after another ran alone, a third joins two, a
// model pauses and returns, a heavy weight joins, weights change), and the faults fixed with
// the redesign (an empty EnqueueAll, expired requests holding queue places).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "worker/scheduler/scheduler.h"

namespace ferry {
namespace {

constexpr Nanos kMs = 1'000'000;

ModelSpec Spec(const std::string& name) {
  ModelSpec spec;
  spec.name = name;
  spec.batch_sizes = {1};
  return spec;
}

// A saturated GPU in virtual time: each model in `backlogged` always has a request queued;
// every dispatch of model m costs cost[m] seconds. Records, per model, the longest time
// between the end of one of its dispatches and the start of its next while backlogged.
struct Run {
  Scheduler s;
  std::map<int, double> cost;
  std::map<int, Nanos> last_end;
  std::map<int, Nanos> longest_gap;
  std::map<int, double> busy;  // GPU seconds per model in the current window.
  Nanos now = 0;

  void Join(int m) {
    REQUIRE(s.Enqueue(m, QueuedRequest{0, 0, 1, now, {}, 0}).ok());
    last_end[m] = now;
  }
  void Leave(int m) {
    // Drop what is queued by letting it run out: callers stop refilling.
    refill.erase(m);
  }
  std::map<int, bool> refill;
  void Step() {
    Decision d = s.Next(now);
    REQUIRE(d.dispatch.runs());
    int m = d.dispatch.model;
    if (refill.count(m) && last_end.count(m)) {
      longest_gap[m] = std::max(longest_gap[m], now - last_end[m]);
    }
    now += static_cast<Nanos>(cost[m] * kNanosPerSecond);
    busy[m] += cost[m];
    s.Complete(d.dispatch, cost[m], now);
    last_end[m] = now;
    if (refill.count(m)) {
      REQUIRE(s.Enqueue(m, QueuedRequest{0, 0, 1, now, {}, 0}).ok());
    }
  }
  void RunFor(double seconds) {
    Nanos until = now + static_cast<Nanos>(seconds * kNanosPerSecond);
    while (now < until) {
      Step();
    }
  }
  void Start(int m) {
    refill[m] = true;
    Join(m);
  }
};

Run MakeRun(std::vector<std::pair<std::string, double>> weights, std::vector<double> costs) {
  SchedulerConfig config;
  std::vector<ModelSpec> specs;
  for (auto& [name, w] : weights) {
    config.models[name].weight = w;
    specs.push_back(Spec(name));
  }
  Result<Scheduler> s = Scheduler::Create(config, specs);
  REQUIRE(s.ok());
  Run run{std::move(*s), {}, {}, {}, {}, 0, {}};
  for (size_t i = 0; i < costs.size(); ++i) {
    run.cost[static_cast<int>(i)] = costs[i];
    run.s.SeedCost(static_cast<int>(i), 0, 1, costs[i]);
  }
  return run;
}

// The bound: (W / w_i - 1) d_i + sum over the other backlogged j of D_j, in ns.
Nanos Bound(const std::vector<double>& w, const std::vector<double>& d, int i,
            const std::vector<int>& backlogged) {
  double total = 0, others = 0;
  for (int j : backlogged) {
    total += w[static_cast<size_t>(j)];
    if (j != i) {
      others += d[static_cast<size_t>(j)];
    }
  }
  double b = (total / w[static_cast<size_t>(i)] - 1) * d[static_cast<size_t>(i)] + others;
  return static_cast<Nanos>(b * kNanosPerSecond) + 1;
}

TEST_CASE("a model that ran alone for 200 s does not lock out one that joins") {
  std::vector<double> w = {1, 1}, d = {0.001, 0.001};
  Run run = MakeRun({{"a", 1}, {"b", 1}}, d);
  run.Start(0);
  run.RunFor(200);
  run.longest_gap.clear();
  Nanos joined = run.now;
  run.Start(1);
  run.Step();
  run.Step();
  // b runs within one dispatch of a's of joining.
  CHECK(run.last_end[1] - joined <= static_cast<Nanos>(2 * kMs) + 1);
  run.RunFor(10);
  CHECK(run.longest_gap[0] <= Bound(w, d, 0, {0, 1}));
  CHECK(run.longest_gap[1] <= Bound(w, d, 1, {0, 1}));
}

TEST_CASE("a third model joining two running ones waits at most the bound") {
  std::vector<double> w = {1, 1, 1}, d = {0.001, 0.002, 0.0005};
  Run run = MakeRun({{"a", 1}, {"b", 1}, {"c", 1}}, d);
  run.Start(0);
  run.Start(1);
  run.RunFor(100);
  run.longest_gap.clear();
  run.Start(2);
  run.RunFor(5);
  for (int i : {0, 1, 2}) {
    CAPTURE(i);
    CHECK(run.longest_gap[i] <= Bound(w, d, i, {0, 1, 2}));
  }
  // Shares by weight in GPU time since the join, within 2 points.
  run.busy.clear();
  run.RunFor(5);
  double total = run.busy[0] + run.busy[1] + run.busy[2];
  for (int i : {0, 1, 2}) {
    CHECK(run.busy[i] / total == doctest::Approx(1.0 / 3).epsilon(0.06));
  }
}

TEST_CASE(
    "a model loaded on a running worker (AddModel) joins within the bound; unloaded, its "
    "name is free again") {
  std::vector<double> w = {1, 1, 1}, d = {0.001, 0.002, 0.0005};
  Run run = MakeRun({{"a", 1}, {"b", 1}}, {d[0], d[1]});
  run.Start(0);
  run.Start(1);
  run.RunFor(100);
  run.longest_gap.clear();
  REQUIRE(run.s.AddModel(Spec("c")).ok());  // Loaded after 100 s of the others.
  REQUIRE(run.s.num_models() == 3);
  run.cost[2] = d[2];
  run.Start(2);
  run.RunFor(5);
  for (int i : {0, 1, 2}) {
    CAPTURE(i);
    CHECK(run.longest_gap[i] <= Bound(w, d, i, {0, 1, 2}));
  }
  run.busy.clear();
  run.RunFor(5);
  double total = run.busy[0] + run.busy[1] + run.busy[2];
  CHECK(run.busy[2] / total == doctest::Approx(1.0 / 3).epsilon(0.06));
  // A name in use is refused; a retired model's name may be loaded again, at a new index.
  CHECK(run.s.AddModel(Spec("c")).error().message == "scheduler: model 'c' registered twice");
  ModelSpec bad = Spec("e");
  bad.batch_sizes = {4, 2};
  CHECK_FALSE(run.s.AddModel(bad).ok());
  run.Leave(2);
  run.RunFor(1);  // Its queue runs out.
  run.s.RetireModel(2, "(unloaded 2)");
  CHECK(run.s.FindModel("c") == -1);
  REQUIRE(run.s.AddModel(Spec("c")).ok());
  CHECK(run.s.FindModel("c") == 3);
}

TEST_CASE("a model that pauses and returns neither locks others out nor is locked out") {
  std::vector<double> w = {1, 1}, d = {0.001, 0.001};
  Run run = MakeRun({{"a", 1}, {"b", 1}}, d);
  run.Start(0);
  run.Start(1);
  run.RunFor(50);
  run.Leave(1);
  run.RunFor(20);  // b paused (its last queued request ran early on).
  run.longest_gap.clear();
  run.Start(1);
  run.RunFor(5);
  CHECK(run.longest_gap[0] <= Bound(w, d, 0, {0, 1}));
  CHECK(run.longest_gap[1] <= Bound(w, d, 1, {0, 1}));
}

TEST_CASE("a weight-4 model joining three weight-1 models: nobody waits past the bound") {
  std::vector<double> w = {1, 1, 1, 4}, d = {0.001, 0.001, 0.001, 0.001};
  Run run = MakeRun({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 4}}, d);
  for (int i : {0, 1, 2}) {
    run.Start(i);
  }
  run.RunFor(100);
  run.longest_gap.clear();
  run.Start(3);
  run.busy.clear();
  run.RunFor(2);
  for (int i : {0, 1, 2, 3}) {
    CAPTURE(i);
    CHECK(run.longest_gap[i] <= Bound(w, d, i, {0, 1, 2, 3}));
  }
  double total = run.busy[0] + run.busy[1] + run.busy[2] + run.busy[3];
  CHECK(run.busy[3] / total == doctest::Approx(4.0 / 7).epsilon(0.035));
}

TEST_CASE("set_policy: shares follow a weight change within a second, gaps stay bounded") {
  std::vector<double> w = {1, 1}, d = {0.002, 0.0005};
  Run run = MakeRun({{"a", 1}, {"b", 1}}, d);
  run.Start(0);
  run.Start(1);
  run.RunFor(30);
  REQUIRE(run.s.SetPolicy("a", 3).ok());
  w[0] = 3;
  run.Step();  // Applies the change.
  run.longest_gap.clear();
  run.busy.clear();
  run.RunFor(1);
  CHECK(run.busy[0] / (run.busy[0] + run.busy[1]) == doctest::Approx(0.75).epsilon(0.027));
  CHECK(run.longest_gap[0] <= Bound(w, d, 0, {0, 1}));
  CHECK(run.longest_gap[1] <= Bound(w, d, 1, {0, 1}));
}

TEST_CASE("leftover GPU time goes to the others by weight, not by cost") {
  // a and b saturated with weights 1:2 and per-dispatch costs 10:1; c uses ~20% of the GPU.
  std::vector<double> d = {0.010, 0.001, 0.002};
  Run run = MakeRun({{"a", 1}, {"b", 2}, {"c", 1}}, d);
  run.Start(0);
  run.Start(1);
  Nanos next_c = 0;
  for (int step = 0; step < 40000; ++step) {
    if (run.now >= next_c) {
      REQUIRE(run.s.Enqueue(2, QueuedRequest{0, 0, 1, run.now, {}, 0}).ok());
      next_c = run.now + 10 * kMs;  // 2 ms every 10 ms: 20%.
    }
    run.Step();
  }
  CHECK(run.busy[1] / run.busy[0] == doctest::Approx(2.0).epsilon(0.05));
}

TEST_CASE("switching back to fair after fifo locks nobody out") {
  std::vector<double> w = {1, 1}, d = {0.001, 0.001};
  Run run = MakeRun({{"a", 1}, {"b", 1}}, d);
  REQUIRE(run.s.SetDiscipline(Discipline::kFifo).ok());
  run.Start(0);
  run.RunFor(50);  // a alone: under fifo its tag runs 50 s ahead.
  run.Start(1);
  run.RunFor(10);  // fifo alternates by age.
  REQUIRE(run.s.SetDiscipline(Discipline::kFair).ok());
  run.Step();
  run.longest_gap.clear();
  run.RunFor(5);
  CHECK(run.longest_gap[0] <= Bound(w, d, 0, {0, 1}));
  CHECK(run.longest_gap[1] <= Bound(w, d, 1, {0, 1}));
}

TEST_CASE("a weight change between dispatch and completion corrects with the charged weight") {
  Run run = MakeRun({{"a", 2}, {"b", 1}}, {0.010, 0.010});
  run.Start(0);
  run.Start(1);
  run.RunFor(1);
  Decision d = run.s.Next(run.now);
  REQUIRE(d.dispatch.runs());
  double weight_then = d.dispatch.model == 0 ? 2.0 : 1.0;
  REQUIRE(d.dispatch.charges.size() == 1);
  CHECK(d.dispatch.charges[0].model_weight == weight_then);
  CHECK(d.dispatch.charged_seconds == doctest::Approx(0.010));
  REQUIRE(run.s.SetPolicy(d.dispatch.model == 0 ? "a" : "b", 100).ok());
  (void)run.s.Next(run.now);  // Applies the change (and dispatches the other model).
  run.s.Complete(d.dispatch, 0.001, run.now);  // Corrected at the weight it was charged at.
  CHECK(d.dispatch.charges[0].model_weight == weight_then);
}

TEST_CASE("EnqueueAll with no pieces is refused and leaves nothing active") {
  Run run = MakeRun({{"a", 1}}, {0.001});
  std::vector<QueuedRequest> none;
  CHECK(run.s.EnqueueAll(0, none).error().code == ErrorCode::kInvalidArgument);
  Decision d = run.s.Next(0);  // Used to read front() of an empty queue.
  CHECK_FALSE(d.dispatch.runs());
  CHECK(d.dispatch.model == -1);
}

TEST_CASE("expired requests give up their queue places when the queue is full") {
  SchedulerConfig config;
  config.max_queue_depth = 4;
  Result<Scheduler> made = Scheduler::Create(config, {Spec("a")});
  REQUIRE(made.ok());
  Scheduler& s = *made;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(s.Enqueue(0, QueuedRequest{static_cast<uint64_t>(i), 0, 1, 0, 5 * kMs, 0}).ok());
  }
  // Full, but every queued request has passed its deadline by 10 ms.
  CHECK(s.Enqueue(0, QueuedRequest{9, 0, 1, 10 * kMs, {}, 0}).ok());
  CHECK(s.queue_depth(0) == 1);
  Decision shed = s.Next(10 * kMs);
  CHECK_FALSE(shed.dispatch.runs());
  CHECK(shed.dispatch.shed.size() == 4);
  CHECK(s.Metrics(10 * kMs)[0].shed == 4);
  Decision run = s.Next(10 * kMs);
  REQUIRE(run.dispatch.runs());
  CHECK(run.dispatch.requests[0].payload == 9);
  // A full queue of live requests still refuses.
  for (int i = 0; i < 4; ++i) {
    REQUIRE(s.Enqueue(0, QueuedRequest{0, 0, 1, 20 * kMs, 100 * kMs, 0}).ok());
  }
  CHECK(s.Enqueue(0, QueuedRequest{0, 0, 1, 20 * kMs, {}, 0}).error().code ==
        ErrorCode::kResourceExhausted);
}

// A burst of N rows in requests of at most r rows runs in at most
// ceil(N / (largest - r + 1)) + (number of compiled sizes) dispatches.
TEST_CASE("coalescing fills its size: bursts of multi-row requests meet the dispatch bound") {
  for (int64_t r : {1, 3, 5, 8}) {
    for (std::optional<int64_t> cap : {std::optional<int64_t>(), std::optional<int64_t>(7)}) {
      CAPTURE(r);
      SchedulerConfig config;
      config.max_queue_depth = 100000;
      if (cap) {
        config.models["m"].max_batch_size = *cap;
      }
      ModelSpec spec;
      spec.name = "m";
      spec.batch_sizes = {1, 8, 32};
      Result<Scheduler> made = Scheduler::Create(config, {spec});
      REQUIRE(made.ok());
      Scheduler& s = *made;
      int64_t n = 0;
      for (int i = 0; i < 300; ++i) {
        int64_t rows = 1 + (i * 7) % r;  // Mixed sizes, at most r.
        if (cap && rows > *cap) {
          rows = *cap;
        }
        REQUIRE(s.Enqueue(0, QueuedRequest{0, 0, rows, 0, {}, 0}).ok());
        n += rows;
      }
      int64_t largest = cap ? *cap : 32;
      int64_t r_eff = std::min(r, largest);
      int64_t bound = (n + (largest - r_eff)) / (largest - r_eff + 1) + 3;
      int dispatches = 0;
      while (s.queued_requests() > 0) {
        Decision d = s.Next(0);
        REQUIRE(d.dispatch.runs());
        ++dispatches;
        s.Complete(d.dispatch, 0.001, 0);
      }
      CHECK(dispatches <= bound);
    }
  }
  // The case: 300 requests of 3 rows, sizes [1, 8, 32]: 30 dispatches of 30 rows.
  SchedulerConfig config;
  config.max_queue_depth = 1000;
  ModelSpec spec;
  spec.name = "m";
  spec.batch_sizes = {1, 8, 32};
  Scheduler s = std::move(Scheduler::Create(config, {spec})).value();
  for (int i = 0; i < 300; ++i) {
    REQUIRE(s.Enqueue(0, QueuedRequest{0, 0, 3, 0, {}, 0}).ok());
  }
  int dispatches = 0;
  while (s.queued_requests() > 0) {
    Decision d = s.Next(0);
    CHECK(d.dispatch.rows == 30);
    CHECK(d.dispatch.batch_size == 32);
    ++dispatches;
  }
  CHECK(dispatches == 30);
}

TEST_CASE("max_batch_size and max_queue_depth change live, from the next decision") {
  SchedulerConfig config;
  config.max_queue_depth = 100;
  ModelSpec spec;
  spec.name = "m";
  spec.batch_sizes = {1, 8, 32};
  Scheduler s = std::move(Scheduler::Create(config, {spec})).value();
  for (int i = 0; i < 64; ++i) {
    REQUIRE(s.Enqueue(0, QueuedRequest{0, 0, 1, 0, {}, 0}).ok());
  }
  CHECK(s.Next(0).dispatch.rows == 32);  // Uncapped: the largest compiled size.
  REQUIRE(s.SetMaxBatchSize("m", 8).ok());
  Decision capped = s.Next(0);
  CHECK(capped.dispatch.rows == 8);
  CHECK(capped.dispatch.batch_size == 8);
  REQUIRE(capped.controls.size() == 1);
  CHECK(capped.controls[0].kind == SchedulerChange::Kind::kSetMaxBatchSize);
  REQUIRE(s.SetMaxBatchSize("m", std::nullopt).ok());
  CHECK(s.Next(0).dispatch.rows == 24);  // The rest, at the largest size again.
  CHECK(s.SetMaxBatchSize("m", 0).error().code == ErrorCode::kInvalidArgument);
  CHECK(s.SetMaxBatchSize("nope", 4).error().code == ErrorCode::kNotFound);

  // Queue depth: lowered below what is queued, the queued requests stay and run; only new
  // ones are refused until the queue is under the limit again. (One row per dispatch here.)
  REQUIRE(s.SetMaxBatchSize("m", 1).ok());
  for (int i = 0; i < 10; ++i) {
    REQUIRE(s.Enqueue(0, QueuedRequest{0, 0, 1, 0, {}, 0}).ok());
  }
  REQUIRE(s.SetMaxQueueDepth(5).ok());
  CHECK(s.Next(0).dispatch.rows == 1);  // Applies both; 9 stay queued.
  CHECK(s.queued_requests() == 9);
  CHECK(s.Enqueue(0, QueuedRequest{0, 0, 1, 0, {}, 0}).error().code ==
        ErrorCode::kResourceExhausted);
  int ran = 0;
  while (s.queued_requests() > 4) {
    ran += static_cast<int>(s.Next(0).dispatch.rows);
  }
  CHECK(ran == 5);                                             // Every queued request ran.
  CHECK(s.Enqueue(0, QueuedRequest{0, 0, 1, 0, {}, 0}).ok());  // 4 + 1 <= 5.
  CHECK(s.Enqueue(0, QueuedRequest{0, 0, 1, 0, {}, 0}).error().code ==
        ErrorCode::kResourceExhausted);
  CHECK(s.SetMaxQueueDepth(0).error().code == ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
