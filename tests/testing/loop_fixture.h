// The dispatch loop in one process, for its tests: the loop runs on a thread over a real
// segment with an injected Sim backend (faults on demand), the test thread is the hook host.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "tests/testing/node_driver.h"
#include "tests/testing/shm_name.h"
#include "worker/backends/repository.h"
#include "worker/backends/sim/sim_backend.h"
#include "worker/dispatch_loop.h"

namespace ferry::testing {

using worker::DispatchLoop;
using worker::DispatchLoopOptions;
using worker::LoopModel;

// Sim timing, with faults on demand: a model whose batches fail, and a sticky fault after
// which the backend reports itself unhealthy.
class FaultyBackend : public SimBackend {
 public:
  // Every batch takes 200 us; the cnn's take 150 ms (a long execution).
  FaultyBackend() : SimBackend({{"cnn", SimCost{0.15, 0, {}}}}, SimCost{0.0002, 0, {}}) {}
  Status Begin(ModelHandle model, const BatchJob& job) override {
    if (model == failing_model) {
      return Internal("kernel launch failed: out of resources");
    }
    if (sticky) {
      lost_context = true;
      return Internal("an illegal memory access was encountered");
    }
    return SimBackend::Begin(model, job);
  }
  Status RunHere(ModelHandle model, const BatchJob& job) override {
    ran_here.fetch_add(1);
    return Begin(model, job);
  }
  Status ModelStatus(ModelHandle model) const override {
    if (model == failing_model) {
      return Internal("model marked failed after a launch failure");
    }
    return SimBackend::ModelStatus(model);
  }
  bool Healthy() const override { return !lost_context; }
  bool RunsOnHostCpus() const override { return on_host_cpus; }
  Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) override {
    executed.fetch_add(1);  // Synchronous runs: the warm-up's.
    return SimBackend::Execute(model, job);
  }

  ModelHandle failing_model = -1;  // Set before the loop starts.
  bool on_host_cpus = false;       // As the CPU backend says (set before the loop starts).
  std::atomic<bool> sticky{false};
  std::atomic<bool> lost_context{false};
  std::atomic<int> executed{0};
  std::atomic<int> ran_here{0};  // Batches the loop ran on its own thread (RunHere).
};

struct LoopFixture {
  std::string name = UniqueShmName("loop");
  shm::Segment segment = shm::Segment::Create(name, {1, 1, 64, 16 << 20}).value();
  std::vector<RepositoryModel> repo = LoadRepository("examples/models").value();
  FaultyBackend backend;
  std::optional<Scheduler> scheduler;
  std::unique_ptr<DispatchLoop> loop;
  std::thread thread;
  int exit_code = -1;

  explicit LoopFixture(DispatchLoopOptions options = {}, SchedulerConfig config = {}) {
    std::vector<LoopModel> models;
    std::vector<ModelSpec> specs;
    for (const RepositoryModel& m : repo) {
      models.push_back({m.name, m.bundle.get(), backend.Load(*m.bundle).value(), std::nullopt});
      specs.push_back(SpecForModel(m));
    }
    scheduler.emplace(Scheduler::Create(config, std::move(specs)).value());
    loop = std::make_unique<DispatchLoop>(segment, segment.WorkerSlot(0), &backend, &*scheduler,
                                          std::move(models), options);
  }
  // Runs the loop on its thread; `on_thread` first runs there (e.g. WaitForWork's test hooks,
  // which are per thread).
  void Start(std::function<void()> on_thread = {}) {
    thread = std::thread([this, on_thread] {
      if (on_thread) {
        on_thread();
      }
      exit_code = loop->Run();
    });
  }
  ~LoopFixture() {
    if (thread.joinable()) {
      SendControl(segment, segment.WorkerSlot(0), {shm::ControlCode::kStop, 0, 0, 0});
      thread.join();
    }
    shm::Segment::Remove(name);
  }
};

inline constexpr uint32_t kCnn = 0;
inline constexpr uint32_t kMlp = 1;

inline std::vector<Completion> RunOne(NodeDriver& driver, uint32_t model) {
  static std::vector<uint8_t> mlp(784 * 4), cnn(3072 * 4);
  std::vector<Completion> done;
  if (model == kMlp) {
    REQUIRE(driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, mlp}}).ok());
  } else {
    REQUIRE(driver.Submit(kCnn, 0, 1, {{DType::kF32, {1, 3, 32, 32}, cnn}}).ok());
  }
  for (int i = 0; i < 5000 && done.empty(); ++i) {
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  REQUIRE(done.size() == 1);
  return done;
}

// Returns once the loop has begun `count` batches (its status says so), so requests sent next
// arrive while that batch executes; polled for up to 10 s, since a loaded CI machine may run
// the loop thread late (a fixed sleep assumed it would not).
inline void WaitDispatched(const LoopFixture& f, uint64_t count) {
  for (int i = 0; i < 10000; ++i) {
    Result<shm::StatusSnapshotData> s = shm::ReadStatus(f.segment, f.segment.WorkerSlot(0));
    if (s.ok() && s->dispatches >= count) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("the loop began no batch in 10 s");
}

}  // namespace ferry::testing
