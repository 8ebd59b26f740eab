// The weight budget against a backend that records what it holds: floors at start, cold loads
// on the loader thread while the scheduler serves resident models, releases that wait for a
// model's batches, the budget never exceeded, and the refusals that name sizes.
#include "worker/weight_residency.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "worker/scheduler/scheduler_testing.h"

namespace ferry::worker {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Holds each model's bytes while "resident"; RestoreWeights waits for Open() when gated.
class RecordingBackend : public Backend {
 public:
  explicit RecordingBackend(std::vector<uint64_t> bytes) : bytes_(std::move(bytes)) {
    held_.assign(bytes_.size(), true);
  }
  std::string_view name() const override { return "recording"; }
  Result<ModelHandle> Load(const Bundle&) override { return Internal("not used"); }
  Result<ExecutionTiming> Execute(ModelHandle, const BatchJob&) override {
    return ExecutionTiming{};
  }
  Status ModelStatus(ModelHandle) const override { return OkStatus(); }
  bool SupportsResidency() const override { return true; }
  uint64_t WeightBytes(ModelHandle m) const override { return bytes_[static_cast<size_t>(m)]; }
  void ReleaseWeights(ModelHandle m) override {
    std::lock_guard lock(mu_);
    held_[static_cast<size_t>(m)] = false;
    ++releases;
  }
  Status RestoreWeights(ModelHandle m) override {
    std::this_thread::sleep_for(restore_time);
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return !gated_; });
    held_[static_cast<size_t>(m)] = true;
    max_held = std::max(max_held, HeldLocked());
    ++restores;
    if (fail_next) {
      fail_next = false;
      held_[static_cast<size_t>(m)] = false;
      return Internal("disk read failed");
    }
    return OkStatus();
  }
  void Gate() {
    std::lock_guard lock(mu_);
    gated_ = true;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      gated_ = false;
    }
    cv_.notify_all();
  }
  bool held(int m) {
    std::lock_guard lock(mu_);
    return held_[static_cast<size_t>(m)];
  }
  uint64_t Held() {
    std::lock_guard lock(mu_);
    return HeldLocked();
  }
  std::atomic<int> releases{0}, restores{0};
  std::atomic<bool> fail_next{false};
  std::chrono::microseconds restore_time{0};
  uint64_t max_held = 0;  // Under mu_.

 private:
  uint64_t HeldLocked() const {
    uint64_t sum = 0;
    for (size_t i = 0; i < held_.size(); ++i) {
      sum += held_[i] ? bytes_[i] : 0;
    }
    return sum;
  }
  std::vector<uint64_t> bytes_;
  std::vector<bool> held_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool gated_ = false;
};

ResidencyOptions Options(uint64_t budget, bool evict_all = false) {
  ResidencyOptions options;
  options.budget = budget;
  options.evict_all = evict_all;
  return options;
}

struct Fixture {
  Fixture(std::vector<uint64_t> bytes, uint64_t budget)
      : backend(bytes), scheduler(Make(bytes.size())) {
    residency = std::make_unique<WeightResidency>(&backend, &scheduler, Options(budget), [] {});
  }
  static Scheduler Make(size_t n) {
    std::vector<ModelSpec> specs;
    for (size_t i = 0; i < n; ++i) {
      specs.push_back(testing::Spec("m" + std::to_string(i), {1}));
    }
    return testing::Make(specs);
  }
  Status Add(int i, Residency floor) {
    return residency->Add(i, "m" + std::to_string(i), i, floor);
  }
  // Turns until the load in flight finishes (or `limit`).
  void Settle(const std::function<bool(int)>& busy = [](int) { return false; }) {
    for (int i = 0; i < 2000; ++i) {
      residency->Turn(busy, true);
      if (!residency->loading()) {
        residency->Turn(busy, true);
        if (!residency->loading()) {
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    FAIL("the load never finished");
  }
  RecordingBackend backend;
  Scheduler scheduler;
  std::unique_ptr<WeightResidency> residency;
};

TEST_CASE("the budget: as configured, else what the backend holds, never more than that") {
  constexpr uint64_t kArena = 8 << 20;
  CHECK(ChooseWeightBudget(0, 0) == 0);                // CPU, unset: every model resident.
  CHECK(ChooseWeightBudget(6 << 20, 0) == (6 << 20));  // CPU: as configured.
  CHECK(ChooseWeightBudget(0, kArena) == kArena);      // GPU, unset: the weight arena.
  CHECK(ChooseWeightBudget(6 << 20, kArena) == (6 << 20));
  CHECK(ChooseWeightBudget(64 << 20, kArena) == kArena);  // GPU: clamped to the arena.
}

TEST_CASE("at start: pinned kept, warm kept while it fits, on_demand released") {
  Fixture f({3 * kMiB, 3 * kMiB, 3 * kMiB, 3 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kPinned).ok());
  REQUIRE(f.Add(1, Residency::kWarm).ok());
  REQUIRE(f.Add(2, Residency::kWarm).ok());  // 9 MiB would pass 8: released.
  REQUIRE(f.Add(3, Residency::kOnDemand).ok());
  CHECK(f.backend.held(0));
  CHECK(f.backend.held(1));
  CHECK_FALSE(f.backend.held(2));
  CHECK_FALSE(f.backend.held(3));
  CHECK(f.residency->resident(0));
  CHECK_FALSE(f.residency->resident(2));
  CHECK_FALSE(f.scheduler.resident(3));
  CHECK(f.residency->resident_bytes() == 6 * kMiB);
  CHECK(f.residency->budget() == 8 * kMiB);
}

TEST_CASE("weights larger than the budget, alone or beside pinned ones, are refused by size") {
  Fixture f({5 * kMiB, 9 * kMiB, 4 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kPinned).ok());
  Status alone = f.Add(1, Residency::kOnDemand);
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.error().code == ErrorCode::kResourceExhausted);
  CHECK(alone.error().message.find("9437184 bytes") != std::string::npos);
  CHECK(alone.error().message.find("8388608 bytes") != std::string::npos);
  Status beside = f.Add(2, Residency::kOnDemand);
  REQUIRE_FALSE(beside.ok());
  CHECK(beside.error().message.find("5242880 of them held by pinned models") != std::string::npos);
  CHECK_FALSE(f.backend.held(1));
  CHECK_FALSE(f.backend.held(2));
}

TEST_CASE("a cold load runs beside resident models, evicts the least recent, and is charged") {
  Fixture f({4 * kMiB, 4 * kMiB, 4 * kMiB}, 8 * kMiB);
  for (int i : {0, 1, 2}) {
    REQUIRE(f.Add(i, Residency::kOnDemand).ok());
  }
  CHECK(f.backend.Held() == 0);
  testing::Push(f.scheduler, 0, testing::Req(0));
  auto serve = [&](int m, Nanos now) {
    Decision d = f.scheduler.Next(now);
    REQUIRE(d.dispatch.model == m);
    f.scheduler.Complete(d.dispatch, 0.001, now);
  };
  f.Settle();
  CHECK(f.residency->resident(0));
  serve(0, 0);
  testing::Push(f.scheduler, 1, testing::Req(0));
  f.Settle();
  serve(1, 0);
  CHECK(f.backend.Held() == 8 * kMiB);
  f.residency->Touch(0);  // 0 more recent than 1.
  // m2's load is held on the loader thread: m0 stays selectable, m2 is not.
  f.backend.Gate();
  testing::Push(f.scheduler, 0, testing::Req(0));
  testing::Push(f.scheduler, 2, testing::Req(0));
  f.residency->Turn([](int) { return false; }, true);  // Evicts m1, releases it.
  f.residency->Turn([](int) { return false; }, true);  // Starts m2's load.
  CHECK(f.residency->loading());
  CHECK_FALSE(f.backend.held(1));
  CHECK(f.residency->counters(1).evictions == 1);
  Decision d = f.scheduler.Next(testing::kMs);
  REQUIRE(d.dispatch.runs());
  CHECK(d.dispatch.model == 0);
  f.scheduler.Complete(d.dispatch, 0.001, 2 * testing::kMs);
  CHECK_FALSE(f.scheduler.Next(3 * testing::kMs).dispatch.runs());  // m2 still loading.
  f.backend.Open();
  f.Settle();
  CHECK(f.scheduler.resident(2));
  CHECK(f.residency->counters(2).loads == 1);
  CHECK(f.residency->counters(2).last_load_ns > 0);
  CHECK(f.residency->cold_loads() == 3);
  CHECK(f.backend.max_held <= 8 * kMiB);
  Decision next = f.scheduler.Next(4 * testing::kMs);
  CHECK(next.dispatch.model == 2);
}

TEST_CASE("a victim's release waits for its batch; the load waits for the release") {
  Fixture f({4 * kMiB, 4 * kMiB, 4 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kWarm).ok());
  REQUIRE(f.Add(1, Residency::kWarm).ok());
  REQUIRE(f.Add(2, Residency::kOnDemand).ok());
  f.residency->Touch(1);  // m0 is the least recent.
  bool m0_running = true;
  auto busy = [&](int m) { return m == 0 && m0_running; };
  testing::Push(f.scheduler, 2, testing::Req(0));
  for (int i = 0; i < 5; ++i) {
    f.residency->Turn(busy, true);
  }
  CHECK(f.backend.held(0));  // Its batch still runs.
  CHECK_FALSE(f.residency->loading());
  CHECK_FALSE(f.scheduler.resident(0));  // But no new batch of it is chosen.
  m0_running = false;
  f.Settle(busy);
  CHECK_FALSE(f.backend.held(0));
  CHECK(f.backend.held(2));
  CHECK(f.backend.max_held <= 8 * kMiB);
}

TEST_CASE("pinned models are never evicted, however many loads pass") {
  Fixture f({2 * kMiB, 3 * kMiB, 3 * kMiB, 3 * kMiB, 3 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kPinned).ok());
  for (int i = 1; i < 5; ++i) {
    REQUIRE(f.Add(i, Residency::kOnDemand).ok());
  }
  for (int round = 0; round < 20; ++round) {
    int m = 1 + round % 4;
    testing::Push(f.scheduler, m, testing::Req(round));
    f.Settle();
    REQUIRE(f.scheduler.resident(m));
    Decision d = f.scheduler.Next(round * testing::kMs);
    REQUIRE(d.dispatch.model == m);
    f.scheduler.Complete(d.dispatch, 0.001, round * testing::kMs);
    CHECK(f.backend.held(0));
  }
  CHECK(f.residency->counters(0).evictions == 0);
  CHECK(f.backend.max_held <= 8 * kMiB);
  CHECK(f.residency->cold_loads() >= 18);
}

TEST_CASE("a load that fails makes its model unservable, naming why") {
  Fixture f({4 * kMiB, 4 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kOnDemand).ok());
  f.backend.fail_next = true;
  testing::Push(f.scheduler, 0, testing::Req(0));
  std::vector<std::pair<int, Error>> failed;
  for (int i = 0; i < 2000 && failed.empty(); ++i) {
    failed = f.residency->Turn([](int) { return false; }, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].first == 0);
  CHECK(failed[0].second.message.find("disk read failed") != std::string::npos);
  CHECK(f.scheduler.resident(0));  // Its queue drains through the model's failure.
  CHECK(f.residency->resident_bytes() == 0);
}

TEST_CASE("set-residency moves weights now; compact releases and reloads") {
  Fixture f({4 * kMiB, 4 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kOnDemand).ok());
  REQUIRE(f.Add(1, Residency::kWarm).ok());
  REQUIRE(f.residency->SetFloor(0, Residency::kPinned).ok());
  f.Settle();
  CHECK(f.backend.held(0));
  CHECK(f.residency->resident(0));
  REQUIRE(f.residency->SetFloor(1, Residency::kOnDemand).ok());
  f.Settle();
  CHECK_FALSE(f.backend.held(1));
  CHECK_FALSE(f.residency->resident(1));
  REQUIRE(f.residency->SetFloor(1, Residency::kWarm).ok());
  f.Settle();
  CHECK(f.backend.held(1));
  int releases = f.backend.releases, restores = f.backend.restores;
  REQUIRE(f.residency->Compact({}).ok());
  f.Settle();
  CHECK(f.backend.releases == releases + 1);  // m1 (pinned m0 stays).
  CHECK(f.backend.restores == restores + 1);
  CHECK(f.backend.held(0));
  CHECK(f.backend.held(1));
}

TEST_CASE("the naive baseline evicts every non-pinned model on every miss") {
  RecordingBackend backend({2 * kMiB, 2 * kMiB, 2 * kMiB, 2 * kMiB});
  Scheduler scheduler = Fixture::Make(4);
  WeightResidency naive(&backend, &scheduler, Options(8 * kMiB, true), [] {});
  REQUIRE(naive.Add(0, "m0", 0, Residency::kPinned).ok());
  REQUIRE(naive.Add(1, "m1", 1, Residency::kWarm).ok());
  REQUIRE(naive.Add(2, "m2", 2, Residency::kWarm).ok());
  REQUIRE(naive.Add(3, "m3", 3, Residency::kOnDemand).ok());
  testing::Push(scheduler, 3, testing::Req(0));
  for (int i = 0; i < 2000 && !scheduler.resident(3); ++i) {
    naive.Turn([](int) { return false; }, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(scheduler.resident(3));
  CHECK(backend.held(0));        // Pinned stays.
  CHECK_FALSE(backend.held(1));  // Room enough, evicted all the same.
  CHECK_FALSE(backend.held(2));
  CHECK(backend.held(3));
}

// Two backlogged models that do not fit together: each load is followed by a dispatch of its
// model before the other's load may evict it, under both policies.
TEST_CASE("models that do not fit together take turns; none is evicted before it runs") {
  for (bool evict_all : {false, true}) {
    CAPTURE(evict_all);
    RecordingBackend backend({5 * kMiB, 5 * kMiB});
    Scheduler scheduler = Fixture::Make(2);
    WeightResidency r(&backend, &scheduler, Options(8 * kMiB, evict_all), [] {});
    REQUIRE(r.Add(0, "m0", 0, Residency::kOnDemand).ok());
    REQUIRE(r.Add(1, "m1", 1, Residency::kOnDemand).ok());
    std::map<int, int> served;
    Nanos now = 0;
    for (int i = 0; i < 20000 && (served[0] < 5 || served[1] < 5); ++i) {
      for (int m : {0, 1}) {
        if (scheduler.queue_depth(m) == 0) {
          testing::Push(scheduler, m, testing::Req(now));
        }
      }
      r.Turn([](int) { return false; }, true);
      Decision d = scheduler.Next(now);
      if (d.dispatch.runs()) {
        r.Touch(d.dispatch.model);
        now += testing::kMs;
        scheduler.Complete(d.dispatch, 0.001, now);
        ++served[d.dispatch.model];
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    CHECK(served[0] >= 5);
    CHECK(served[1] >= 5);
    CHECK(backend.max_held <= 8 * kMiB);
  }
}

TEST_CASE("max_load_fraction spaces loads: after a load of L, the next waits L (1 - f) / f") {
  RecordingBackend backend({5 * kMiB, 5 * kMiB});
  Scheduler scheduler = Fixture::Make(2);
  ResidencyOptions options = Options(8 * kMiB);
  options.max_load_fraction = 0.001;  // A load of L then holds the next back 999 L.
  backend.restore_time = std::chrono::milliseconds(2);  // About 2 s held back.
  WeightResidency r(&backend, &scheduler, options, [] {});
  REQUIRE(r.Add(0, "m0", 0, Residency::kOnDemand).ok());
  REQUIRE(r.Add(1, "m1", 1, Residency::kOnDemand).ok());
  testing::Push(scheduler, 0, testing::Req(0));
  for (int i = 0; i < 2000 && !scheduler.resident(0); ++i) {
    r.Turn([](int) { return false; }, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(scheduler.resident(0));
  double load = r.counters(0).load_seconds;
  int64_t now = MonotonicNs();
  CHECK(r.LoadDelayNs(now) > 0);
  CHECK(r.LoadDelayNs(now) <= static_cast<int64_t>(load * 999 * 1e9) + 1);
  Decision d = scheduler.Next(0);
  REQUIRE(d.dispatch.model == 0);
  r.Touch(0);
  scheduler.Complete(d.dispatch, 0.001, 0);
  testing::Push(scheduler, 1, testing::Req(0));
  r.Turn([](int) { return false; }, true);
  r.Turn([](int) { return false; }, true);
  CHECK_FALSE(r.loading());  // Held back.
  CHECK_FALSE(scheduler.resident(1));
  CHECK(r.LoadDelayNs(now + static_cast<int64_t>(load * 1000 * 1e9) + 1) == 0);
}

TEST_CASE("a model evicted before it ran after its load does not hold later loads back") {
  ResidencyOptions options = Options(8 * kMiB);
  options.mode = ResidencyMode::kExternal;
  RecordingBackend backend({5 * kMiB, 5 * kMiB});
  Scheduler scheduler = Fixture::Make(2);
  WeightResidency r(&backend, &scheduler, options, [] {});
  REQUIRE(r.Add(0, "m0", 0, Residency::kOnDemand).ok());
  REQUIRE(r.Add(1, "m1", 1, Residency::kOnDemand).ok());
  auto settle = [&](int model) {
    for (int i = 0; i < 2000 && !scheduler.resident(model); ++i) {
      r.Turn([](int) { return false; }, true);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return scheduler.resident(model);
  };
  testing::Push(scheduler, 0, testing::Req(0));
  REQUIRE(settle(0));
  REQUIRE(r.SetFloor(0, Residency::kOnDemand).ok());  // Out before its request ran.
  CHECK_FALSE(scheduler.resident(0));
  testing::Push(scheduler, 1, testing::Req(0));
  REQUIRE(settle(1));  // m1's turn comes first (m0 was charged its load).
  Decision d = scheduler.Next(testing::kMs);
  REQUIRE(d.dispatch.model == 1);
  r.Touch(1);
  scheduler.Complete(d.dispatch, 0.001, testing::kMs);
  CHECK(settle(0));
}

TEST_CASE("a removed model's bytes leave the budget") {
  Fixture f({4 * kMiB, 4 * kMiB}, 8 * kMiB);
  REQUIRE(f.Add(0, Residency::kWarm).ok());
  CHECK(f.residency->resident_bytes() == 4 * kMiB);
  f.residency->Remove(0);
  CHECK(f.residency->resident_bytes() == 0);
  CHECK(f.residency->resident(0));  // No longer managed.
}

}  // namespace
}  // namespace ferry::worker
