// ThreadedBackend: Begin runs a batch on the execution thread and notifies the caller when the
// queue runs empty; RunHere runs it on the caller's thread with no hand-off or notification.
#include "worker/backends/execution_thread.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace ferry {
namespace {

// Records the thread each batch ran on; model 1 fails.
class ThreadRecordingBackend : public ThreadedBackend {
 public:
  ~ThreadRecordingBackend() override { StopExecution(); }
  std::string_view name() const override { return "recording"; }
  Result<ModelHandle> Load(const Bundle&) override { return 0; }
  Status ModelStatus(ModelHandle) const override { return OkStatus(); }
  Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) override {
    ran_on.push_back(std::this_thread::get_id());
    sizes.push_back(job.batch_size);
    if (model == 1) {
      return Internal("model 1 fails");
    }
    return ExecutionTiming{.compute_seconds = 0.001};
  }

  std::vector<std::thread::id> ran_on;  // Read after Finish (which orders it).
  std::vector<int64_t> sizes;
};

TEST_CASE("RunHere runs the batch on the caller's thread, ready at once, without a notification") {
  ThreadRecordingBackend backend;
  std::atomic<int> notified{0};
  backend.SetNotifier([&] { notified.fetch_add(1); });
  BatchJob job{.batch_size = 4};
  int64_t before = MonotonicNs();
  REQUIRE(backend.RunHere(0, job).ok());
  REQUIRE(backend.ran_on.size() == 1);
  CHECK(backend.ran_on[0] == std::this_thread::get_id());
  CHECK(backend.Ready());
  Result<ExecutionTiming> timing = backend.Finish();
  REQUIRE(timing.ok());
  CHECK(timing->compute_seconds == 0.001);
  CHECK(timing->started_ns >= before);
  CHECK(timing->finished_ns >= timing->started_ns);
  CHECK(notified.load() == 0);

  // A batch begun afterwards runs on the execution thread and notifies.
  BatchJob second{.batch_size = 8};
  REQUIRE(backend.Begin(0, second).ok());
  timing = backend.Finish();
  REQUIRE(timing.ok());
  REQUIRE(backend.ran_on.size() == 2);
  CHECK(backend.ran_on[1] != std::this_thread::get_id());
  CHECK(backend.sizes == std::vector<int64_t>{4, 8});
  for (int i = 0; i < 1000 && notified.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(notified.load() == 1);
}

TEST_CASE("a batch run here that fails hands its error to Finish, once") {
  ThreadRecordingBackend backend;
  BatchJob job{.batch_size = 1};
  REQUIRE(backend.RunHere(1, job).ok());
  CHECK(backend.Ready());
  Result<ExecutionTiming> timing = backend.Finish();
  REQUIRE(!timing.ok());
  CHECK(timing.error().message.find("model 1 fails") != std::string::npos);
  // The next result is the next batch's, not the failure again.
  REQUIRE(backend.RunHere(0, job).ok());
  CHECK(backend.Finish().ok());
}

}  // namespace
}  // namespace ferry
