// fair's tenant level (docs/scheduler.md, "Tenants"): GPU time shared between tenants by
// tenant weight before models, the lag bound per tenant across join, leave, pause and weight
// change, a noisy tenant that cannot push a quiet one's wait past its bound, batching across
// tenants kept, and the bookkeeping of requests that leave without running.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "worker/scheduler/scheduler_testing.h"

namespace ferry {
namespace {

using testing::kMs;

constexpr std::array<int64_t, 3> kSizes = {1, 8, 32};

double Cost(int64_t size) { return 0.0005 + 0.00005 * static_cast<double>(size); }

// A GPU in virtual time fed by streams, each keeping `backlog` one-row requests of a tenant
// queued at a model while on. Every dispatch runs for Cost(size) and is split between the
// tenants it carries by rows, as the worker's metrics split it.
struct TenantRun {
  struct Stream {
    uint32_t tenant;
    int model;
    int64_t backlog;
    bool on = true;
    int64_t queued = 0;
  };
  Scheduler s;
  std::vector<Stream> streams;
  Nanos now = 0;
  uint64_t next_payload = 1;
  std::map<uint64_t, size_t> stream_of;    // payload -> stream
  std::map<uint32_t, double> busy;         // GPU seconds by tenant
  std::map<uint32_t, double> model_busy;   // by model
  std::map<uint32_t, int64_t> queued;      // requests by tenant
  std::map<uint32_t, Nanos> since;         // end of the tenant's last service, while backlogged
  std::map<uint32_t, Nanos> longest_gap;   // the longest wait for service while backlogged
  std::map<uint32_t, Nanos> longest_wait;  // the longest queue wait of one request
  std::map<uint64_t, Nanos> arrival;
  int mixed = 0;  // Dispatches carrying more than one tenant.
  int dispatches = 0;

  void Add(uint32_t tenant, int model, int64_t backlog) {
    streams.push_back({tenant, model, backlog});
  }
  void Fill() {
    for (size_t i = 0; i < streams.size(); ++i) {
      Stream& st = streams[i];
      while (st.on && st.queued < st.backlog) {
        QueuedRequest r = testing::Req(now, 1, {}, next_payload);
        r.tenant = st.tenant;
        REQUIRE(s.Enqueue(st.model, r).ok());
        stream_of[next_payload] = i;
        arrival[next_payload] = now;
        ++next_payload;
        ++st.queued;
        if (queued[st.tenant]++ == 0) {
          since[st.tenant] = now;
        }
      }
    }
  }
  void Step() {
    Fill();
    Decision d = s.Next(now);
    REQUIRE(d.dispatch.runs());
    ++dispatches;
    std::map<uint32_t, int64_t> rows;
    for (const QueuedRequest& r : d.dispatch.requests) {
      rows[r.tenant] += r.rows;
      longest_wait[r.tenant] = std::max(longest_wait[r.tenant], now - arrival[r.payload]);
      Stream& st = streams[stream_of[r.payload]];
      --st.queued;
      --queued[r.tenant];
    }
    mixed += rows.size() > 1 ? 1 : 0;
    for (const auto& [t, n] : rows) {
      longest_gap[t] = std::max(longest_gap[t], now - since[t]);
    }
    double seconds = Cost(d.dispatch.batch_size);
    now += static_cast<Nanos>(seconds * kNanosPerSecond);
    s.Complete(d.dispatch, seconds, now);
    model_busy[static_cast<uint32_t>(d.dispatch.model)] += seconds;
    for (const auto& [t, n] : rows) {
      busy[t] += seconds * static_cast<double>(n) / static_cast<double>(d.dispatch.rows);
      since[t] = now;
    }
  }
  void RunFor(double seconds) {
    Nanos until = now + static_cast<Nanos>(seconds * kNanosPerSecond);
    while (now < until) {
      Step();
    }
  }
  double Share(uint32_t tenant) const {
    double total = 0;
    for (const auto& [t, b] : busy) {
      total += b;
    }
    return busy.count(tenant) ? busy.at(tenant) / total : 0;
  }
  void ResetTallies() {
    busy.clear();
    model_busy.clear();
    longest_gap.clear();
    longest_wait.clear();
  }
};

TenantRun MakeRun(int models, std::map<uint32_t, double> tenant_weights,
                  std::map<std::string, double> model_weights = {}) {
  SchedulerConfig config;
  config.tenant_weights = std::move(tenant_weights);
  std::vector<ModelSpec> specs;
  for (int m = 0; m < models; ++m) {
    std::string name = "m" + std::to_string(m);
    specs.push_back(testing::Spec(name, {kSizes.begin(), kSizes.end()}));
    if (model_weights.count(name)) {
      config.models[name].weight = model_weights[name];
    }
  }
  TenantRun run{testing::Make(specs, config)};
  for (int m = 0; m < models; ++m) {
    for (int64_t size : kSizes) {
      run.s.SeedCost(m, 0, size, Cost(size));
    }
  }
  return run;
}

// The tenant lag bound: (W / w_i - 1) d_i + sum over the other backlogged j of D_j, every
// charge at most the longest dispatch.
Nanos TenantBound(const std::map<uint32_t, double>& weights, uint32_t i) {
  double total = 0;
  for (const auto& [t, w] : weights) {
    total += w;
  }
  double d = Cost(32);
  double b = (total / weights.at(i) - 1) * d + static_cast<double>(weights.size() - 1) * d;
  return static_cast<Nanos>(b * kNanosPerSecond) + 1;
}

TEST_CASE("a tenant with eight models and one with one get equal GPU time") {
  TenantRun run = MakeRun(9, {});
  for (int m = 0; m < 8; ++m) {
    run.Add(1, m, 64);
  }
  run.Add(2, 8, 64);
  run.RunFor(2);
  run.ResetTallies();
  run.RunFor(20);
  CHECK(std::abs(run.Share(1) - 0.5) <= 0.02);
  CHECK(std::abs(run.Share(2) - 0.5) <= 0.02);
  // Within tenant 1 the eight models share equally (model level).
  for (uint32_t m = 0; m < 8; ++m) {
    CHECK(std::abs(run.model_busy[m] / run.busy[1] - 0.125) <= 0.01);
  }
  CHECK(run.longest_gap[2] <= TenantBound({{1, 1}, {2, 1}}, 2));
}

TEST_CASE("without tenants the same load is shared by model, 8:1") {
  TenantRun run = MakeRun(9, {});
  for (int m = 0; m < 9; ++m) {
    run.Add(0, m, 64);
  }
  run.RunFor(10);
  double eight = 0;
  for (uint32_t m = 0; m < 8; ++m) {
    eight += run.model_busy[m];
  }
  CHECK(std::abs(eight / run.busy[0] - (8.0 / 9.0)) <= 0.02);
}

TEST_CASE("tenant weights 2:1 on one model give 2:1, and batches still mix tenants") {
  TenantRun run = MakeRun(1, {{1, 2.0}, {2, 1.0}});
  run.Add(1, 0, 40);
  run.Add(2, 0, 40);
  run.RunFor(20);
  CHECK(std::abs(run.Share(1) - (2.0 / 3.0)) <= 0.02);
  CHECK(run.mixed > 0);
  CHECK(run.longest_gap[1] <= TenantBound({{1, 2}, {2, 1}}, 1));
  CHECK(run.longest_gap[2] <= TenantBound({{1, 2}, {2, 1}}, 2));
}

TEST_CASE("a noisy tenant flooding a model cannot hold a quiet tenant's requests back") {
  // Tenant 1 keeps 1,000 requests queued at the model; tenant 2 has one at a time. Under one
  // FIFO queue per model tenant 2 would wait behind the flood (~32 dispatches); here it waits
  // at most its tenant bound.
  TenantRun run = MakeRun(1, {});
  run.Add(1, 0, 1000);
  run.Add(2, 0, 1);
  run.RunFor(10);
  CHECK(run.longest_wait[2] <= TenantBound({{1, 1}, {2, 1}}, 2));
  CHECK(run.Share(1) > 0.5);  // The quiet tenant takes only what it asks for.
  CHECK(run.longest_wait[1] > 20 * run.longest_wait[2]);
}

TEST_CASE("the tenant lag bound holds across join, leave, pause and a weight change") {
  std::map<uint32_t, double> weights = {{1, 1}, {2, 1}, {3, 1}};
  TenantRun run = MakeRun(4, {});
  run.Add(1, 0, 64);
  run.Add(1, 1, 64);
  run.Add(2, 2, 64);
  run.RunFor(20);  // Tenant 1 and 2 alone; then 3 joins.
  run.ResetTallies();
  run.Add(3, 3, 64);
  run.RunFor(5);
  for (uint32_t t : {1u, 2u, 3u}) {
    CHECK(run.longest_gap[t] <= TenantBound(weights, t));
    CHECK(std::abs(run.Share(t) - (1.0 / 3.0)) <= 0.02);
  }
  // Tenant 2 pauses for 5 s and returns: no credit for the pause, nobody locked out.
  run.streams[2].on = false;
  run.RunFor(5);
  run.ResetTallies();
  run.streams[2].on = true;
  run.RunFor(5);
  for (uint32_t t : {1u, 2u, 3u}) {
    CHECK(run.longest_gap[t] <= TenantBound(weights, t));
    CHECK(std::abs(run.Share(t) - (1.0 / 3.0)) <= 0.02);
  }
  // Tenant 1's weight goes to 2: half the GPU from its next dispatch on.
  REQUIRE(run.s.SetTenantWeight(1, 2.0).ok());
  run.ResetTallies();
  run.RunFor(5);
  weights[1] = 2;
  for (uint32_t t : {1u, 2u, 3u}) {
    CHECK(run.longest_gap[t] <= TenantBound(weights, t));
  }
  CHECK(std::abs(run.Share(1) - 0.5) <= 0.02);
  // Tenant 3 leaves: the other two split its time by weight, 2:1.
  run.streams[3].on = false;
  run.RunFor(1);
  run.ResetTallies();
  run.RunFor(5);
  CHECK(std::abs(run.busy[1] / (run.busy[1] + run.busy[2]) - (2.0 / 3.0)) <= 0.02);
}

TEST_CASE("within a tenant, models share its time by model weight") {
  TenantRun run = MakeRun(3, {}, {{"m0", 3.0}, {"m1", 1.0}});
  run.Add(1, 0, 64);
  run.Add(1, 1, 64);
  run.Add(2, 2, 64);
  run.RunFor(20);
  CHECK(std::abs(run.Share(1) - 0.5) <= 0.02);
  CHECK(std::abs(run.model_busy[0] / run.busy[1] - 0.75) <= 0.02);
}

TEST_CASE("charges follow the measured time, split by rows") {
  // Tenant 1's model is learned at 1 ms a dispatch but runs 4 ms: the correction charges
  // the measured time, so tenant 2 still gets half the GPU.
  TenantRun run = MakeRun(2, {});
  run.Add(1, 0, 64);
  run.Add(2, 1, 64);
  for (int i = 0; i < 4000; ++i) {
    run.Fill();
    Decision d = run.s.Next(run.now);
    REQUIRE(d.dispatch.runs());
    double seconds = d.dispatch.model == 0 ? 0.004 : 0.001;
    uint32_t t = d.dispatch.requests.front().tenant;
    REQUIRE(d.dispatch.charges.size() == 1);
    CHECK(d.dispatch.charges[0].tenant == t);
    CHECK(d.dispatch.charges[0].fraction == 1.0);
    for (const QueuedRequest& r : d.dispatch.requests) {
      --run.streams[run.stream_of[r.payload]].queued;
    }
    run.now += static_cast<Nanos>(seconds * kNanosPerSecond);
    run.s.Complete(d.dispatch, seconds, run.now);
    run.busy[t] += seconds;
    run.s.SeedCost(d.dispatch.model, 0, d.dispatch.batch_size, 0.001);  // Keep mislearning.
  }
  CHECK(std::abs(run.Share(1) - 0.5) <= 0.02);
}

TEST_CASE("requests that leave without running leave no tenant backlogged") {
  TenantRun run = MakeRun(1, {});
  QueuedRequest r = testing::Req(0, 1, 5 * kMs, 7);
  r.tenant = 3;
  REQUIRE(run.s.Enqueue(0, r).ok());
  QueuedRequest c = testing::Req(0, 1, {}, 8);
  c.tenant = 4;
  REQUIRE(run.s.Enqueue(0, c).ok());
  CHECK(run.s.Cancel(0, 8));
  Decision d = run.s.Next(10 * kMs);  // Tenant 3's request expired.
  CHECK_FALSE(d.dispatch.runs());
  CHECK(d.dispatch.shed.size() == 1);
  CHECK_FALSE(run.s.HasRunnable());
  CHECK(run.s.NextColdLoad() == -1);
  // A new tenant then runs at once, at the smallest size.
  QueuedRequest n = testing::Req(10 * kMs, 1, {}, 9);
  n.tenant = 5;
  REQUIRE(run.s.Enqueue(0, n).ok());
  d = run.s.Next(10 * kMs);
  REQUIRE(d.dispatch.runs());
  CHECK(d.dispatch.requests.front().payload == 9);
}

TEST_CASE("tenant numbers and weights are checked") {
  TenantRun run = MakeRun(1, {});
  QueuedRequest r = testing::Req(0);
  r.tenant = kMaxSchedulerTenants;
  CHECK(run.s.Enqueue(0, r).error().code == ErrorCode::kInvalidArgument);
  CHECK(run.s.SetTenantWeight(kMaxSchedulerTenants, 1).error().code == ErrorCode::kInvalidArgument);
  CHECK(run.s.SetTenantWeight(1, 0).error().code == ErrorCode::kInvalidArgument);
  CHECK(run.s.SetTenantWeight(1, std::nan("")).error().code == ErrorCode::kInvalidArgument);
  SchedulerConfig config;
  config.tenant_weights[2] = -1;
  CHECK_FALSE(Scheduler::Create(config, {testing::Spec("a")}).ok());
  config.tenant_weights = {{64, 1.0}};
  CHECK_FALSE(Scheduler::Create(config, {testing::Spec("a")}).ok());
}

TEST_CASE("a dispatch for one tenant takes its most urgent request first, whatever the queue") {
  TenantRun run = MakeRun(1, {{1, 1.0}, {2, 1.0}});
  // Tenant 1 has charged time already, so tenant 2 is chosen next; its request sits behind
  // 40 of tenant 1's, and leads the batch.
  run.Add(1, 0, 40);
  run.RunFor(0.05);
  QueuedRequest late = testing::Req(run.now, 1, {}, 999999);
  late.tenant = 2;
  REQUIRE(run.s.Enqueue(0, late).ok());
  Decision d = run.s.Next(run.now);
  REQUIRE(d.dispatch.runs());
  CHECK(d.dispatch.requests.front().payload == 999999);
  // Tenant 1 is ahead of tenant 2 in virtual time: its requests do not fill tenant 2's batch.
  CHECK(d.dispatch.requests.size() == 1);
}

TEST_CASE("fifo ignores tenants: after an expired front the next request runs, in order") {
  SchedulerConfig config;
  config.discipline = Discipline::kFifo;
  Scheduler s = testing::Make({testing::Spec("m", {1})}, config);
  QueuedRequest expired = testing::Req(0, 1, 5 * kMs, 1);
  expired.tenant = 1;
  QueuedRequest second = testing::Req(1, 1, {}, 2);
  second.tenant = 2;
  QueuedRequest third = testing::Req(2, 1, {}, 3);
  third.tenant = 1;
  for (const QueuedRequest& r : {expired, second, third}) {
    REQUIRE(s.Enqueue(0, r).ok());
  }
  Decision d = s.Next(10 * kMs);
  REQUIRE(d.dispatch.runs());
  CHECK(d.dispatch.shed.size() == 1);
  CHECK(d.dispatch.requests.front().payload == 2);
}

}  // namespace
}  // namespace ferry
