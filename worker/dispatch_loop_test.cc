// The dispatch loop's fault paths, in one process: the loop runs on a thread over a real
// segment with an injected backend, the test thread is the hook host.
#include "worker/dispatch_loop.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "model/bundle.h"
#include "tests/testing/loop_fixture.h"

namespace ferry::worker {
namespace {

using testing::Completion;
using testing::FaultyBackend;
using Fixture = testing::LoopFixture;
using testing::kCnn;
using testing::kMlp;
using testing::NodeDriver;
using testing::RunOne;
using testing::WaitDispatched;

// No planning ahead: the next batch is decided when the running one ends, with all queued.
DispatchLoopOptions NoPlanAhead() {
  DispatchLoopOptions options;
  options.plan_ahead = false;
  return options;
}

// One cnn row (a 150 ms batch on FaultyBackend); returns its sequence.
uint64_t SubmitCnn(NodeDriver& driver, uint32_t meta = 0, uint32_t priority = 0,
                   uint32_t tenant = 0) {
  static const std::vector<uint8_t> image(3072 * 4);
  Result<uint64_t> sequence =
      driver.Submit(kCnn, 0, 1, {{DType::kF32, {1, 3, 32, 32}, image}}, 0, meta, priority, tenant);
  REQUIRE(sequence.ok());
  return *sequence;
}

TEST_CASE(
    "a backend error fails that batch's requests (INTERNAL, message kept) and the model, "
    "not the worker") {
  Fixture f;
  f.backend.failing_model = kCnn;
  f.Start();
  NodeDriver driver(f.segment, 0);
  std::vector<Completion> done = RunOne(driver, kCnn);
  REQUIRE(done[0].status != 0);
  CHECK(done[0].code() == ErrorCode::kInternal);
  CHECK(done[0].message.find("kernel launch failed") != std::string::npos);
  // The model is failed from now on: later requests get its error at once.
  done = RunOne(driver, kCnn);
  CHECK(done[0].message.find("marked failed") != std::string::npos);
  // The other model serves.
  done = RunOne(driver, kMlp);
  CHECK(done[0].status == 0);
  CHECK(done[0].outputs.size() == 1);
  Result<shm::StatusSnapshotData> status = shm::ReadStatus(f.segment, f.segment.WorkerSlot(0));
  REQUIRE(status.ok());
  CHECK(status->state == static_cast<uint32_t>(shm::ProcessState::kReady));
}

TEST_CASE("a sticky backend fault makes the worker report unhealthy and exit 3") {
  Fixture f;
  f.Start();
  NodeDriver driver(f.segment, 0);
  CHECK(RunOne(driver, kMlp)[0].status == 0);
  f.backend.sticky = true;
  std::vector<Completion> done = RunOne(driver, kMlp);
  CHECK(done[0].code() == ErrorCode::kInternal);
  f.thread.join();
  CHECK(f.exit_code == 3);
  Result<shm::StatusSnapshotData> status = shm::ReadStatus(f.segment, f.segment.WorkerSlot(0));
  REQUIRE(status.ok());
  CHECK(status->state == static_cast<uint32_t>(shm::ProcessState::kUnhealthy));
}

TEST_CASE("the heartbeat advances while the loop idles and while a batch executes") {
  Fixture f;
  f.Start();
  uint32_t slot = f.segment.WorkerSlot(0);
  // When the heartbeat has advanced two beats past `from` (polled each millisecond for up to
  // `limit_ms`), or 0. A polled wait, not a sleep: a loaded CI machine may run the loop late.
  auto two_beats_after = [&](uint64_t from, int limit_ms) -> int64_t {
    for (int i = 0; i < limit_ms; ++i) {
      if (shm::ReadHeartbeat(f.segment, slot) >= from + 2) {
        return MonotonicNs();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return 0;
  };
  CHECK(two_beats_after(shm::ReadHeartbeat(f.segment, slot), 5000) != 0);  // Idle.
  NodeDriver driver(f.segment, 0);
  std::vector<uint8_t> cnn(3072 * 4);
  REQUIRE(driver.Submit(kCnn, 0, 1, {{DType::kF32, {1, 3, 32, 32}, cnn}}).ok());
  WaitDispatched(f, 1);  // The batch (150 ms) has begun.
  CHECK(two_beats_after(shm::ReadHeartbeat(f.segment, slot), 2000) != 0);
  // The beats came while it ran: its answer is not back yet.
  std::vector<Completion> done;
  driver.Poll(&done);
  CHECK(done.empty());
  for (int i = 0; i < 5000 && done.empty(); ++i) {
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  REQUIRE(done.size() == 1);
  CHECK(done[0].status == 0);
  CHECK(done[0].completed_ns - done[0].submitted_ns >= 149'000'000);  // The batch ran its time.
}

TEST_CASE("a request id still live or holding a block is refused, and no block is lost") {
  Fixture f;
  f.Start();
  uint32_t hook = f.segment.HookhostSlot(0);
  shm::Arena arena(f.segment, hook);
  shm::RingProducer submit(f.segment, f.segment.SubmissionRing(0, 0));
  shm::RingConsumer complete(f.segment, f.segment.CompletionRing(0, 0));
  shm::Block input = arena.Allocate(784 * 4).value();
  shm::DescriptorData d{};
  d.kind = static_cast<uint16_t>(shm::DescriptorKind::kSubmit);
  d.slot = hook;
  d.generation = f.segment.generation(hook).load();
  d.sequence = 7;
  d.model = kMlp;
  d.rows = 1;
  d.num_tensors = 1;
  int64_t shape[] = {1, 784};
  d.tensors[0] = shm::MakeTensorRef(hook, input.offset, 784 * 4, DType::kF32, shape);
  auto collect = [&](size_t n) {
    std::vector<shm::DescriptorData> out;
    shm::DescriptorData c{};
    for (int i = 0; i < 5000 && out.size() < n; ++i) {
      while (complete.TryPop(&c) == shm::RingStatus::kOk) {
        out.push_back(c);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return out;
  };
  auto release = [&](const shm::DescriptorData& c) {
    shm::DescriptorData r = c;
    r.kind = static_cast<uint16_t>(shm::DescriptorKind::kRelease);
    REQUIRE(submit.TryPush(r) == shm::RingStatus::kOk);
  };
  REQUIRE(submit.TryPush(d) == shm::RingStatus::kOk);
  REQUIRE(submit.TryPush(d) == shm::RingStatus::kOk);  // Same id while the first is live.
  std::vector<shm::DescriptorData> got = collect(2);
  REQUIRE(got.size() == 2);
  int ok = 0, refused = 0;
  shm::DescriptorData served{};
  for (const auto& c : got) {
    CHECK(c.sequence == 7);
    if (c.status == 0) {
      ++ok;
      served = c;
    } else {
      CHECK(c.status == static_cast<uint32_t>(ErrorCode::kInvalidArgument) + 1);
      ++refused;
    }
  }
  CHECK(ok == 1);
  CHECK(refused == 1);
  // Its completion block is not released yet: the id is still taken.
  REQUIRE(submit.TryPush(d) == shm::RingStatus::kOk);
  got = collect(1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == static_cast<uint32_t>(ErrorCode::kInvalidArgument) + 1);
  // Release everything: the worker's arena is empty again, nothing lost track of.
  release(served);
  REQUIRE(submit.TryPush(d) == shm::RingStatus::kOk);  // Free again: served.
  got = collect(1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == 0);
  release(got[0]);
  bool empty = false;
  for (int i = 0; i < 500 && !empty; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    empty = shm::ReadArenaStats(f.segment, f.segment.WorkerSlot(0)).blocks_in_use == 0;
  }
  CHECK(empty);
}

TEST_CASE("a hook host that stops reading completions gets no more submissions drained") {
  Fixture f;  // Rings of 64.
  f.Start();
  uint32_t hook = f.segment.HookhostSlot(0);
  shm::RingProducer submit(f.segment, f.segment.SubmissionRing(0, 0));
  shm::RingConsumer complete(f.segment, f.segment.CompletionRing(0, 0));
  // Invalid descriptors (no tensor), each answered with an error the host never reads.
  shm::DescriptorData bad{};
  bad.kind = static_cast<uint16_t>(shm::DescriptorKind::kSubmit);
  bad.slot = hook;
  bad.generation = f.segment.generation(hook).load();
  bad.model = kMlp;
  bad.rows = 1;
  uint64_t pushed = 0;
  int full_streak = 0;
  for (int i = 0; i < 20000 && full_streak < 200; ++i) {
    bad.sequence = pushed;
    if (submit.TryPush(bad) == shm::RingStatus::kOk) {
      ++pushed;
      full_streak = 0;
    } else {
      ++full_streak;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // The worker stopped draining: the completion ring (64), its backlog (about one ring) and
  // the submission ring (64) hold everything; without backpressure it would take all 20000.
  CHECK(full_streak >= 200);
  CHECK(pushed < 64 * 4);
  // Reading the completions lets it drain again.
  shm::DescriptorData c{};
  uint64_t answered = 0;
  for (int i = 0; i < 5000 && answered < pushed; ++i) {
    while (complete.TryPop(&c) == shm::RingStatus::kOk) {
      CHECK(c.status == static_cast<uint32_t>(ErrorCode::kInvalidArgument) + 1);
      ++answered;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  CHECK(answered == pushed);
}

}  // namespace
}  // namespace ferry::worker

namespace ferry::worker {
namespace {

TEST_CASE("a pipeline's committed call (descriptor meta) is dispatched ahead of older work") {
  Fixture f(NoPlanAhead());
  f.Start();
  NodeDriver driver(f.segment, 0);
  auto submit = [&](uint32_t meta) { return SubmitCnn(driver, meta); };
  // A cnn batch (150 ms) executes while the rest arrive: plain work first, then two calls of
  // pipeline run 7 (at most one per run is committed: the second queues like new work).
  uint64_t running = submit(0);
  WaitDispatched(f, 1);
  uint64_t plain = submit(0);
  uint64_t committed = submit(7);
  uint64_t second = submit(7);
  std::vector<Completion> done;
  for (int i = 0; i < 5000 && done.size() < 4; ++i) {
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  REQUIRE(done.size() == 4);
  for (const Completion& c : done) {
    CHECK(c.status == 0);
  }
  CHECK(done[0].sequence == running);
  // Without the commit the three would coalesce into one batch, oldest first.
  CHECK(done[1].sequence == committed);
  CHECK(done[1].batch_size == 1);
  CHECK(done[2].sequence == plain);
  CHECK(done[3].sequence == second);
  CHECK(done[2].completed_ns - done[1].completed_ns > 100'000'000);  // Separate batches.
}

}  // namespace
}  // namespace ferry::worker

namespace ferry::worker {
namespace {

// Loads any name as the example mlp's bundle, on the fixture's backend (set once built).
DispatchLoopOptions LoadingOptions(std::shared_ptr<Backend*> backend) {
  DispatchLoopOptions options;
  options.loader = [backend](const std::string& name) {
    LoadedModel loaded;
    loaded.bundle = std::make_unique<Bundle>(LoadBundle("examples/models/mlp").value());
    loaded.model.name = name;
    loaded.model.bundle = loaded.bundle.get();
    loaded.model.handle = (*backend)->Load(*loaded.bundle).value();
    loaded.spec = SpecForBundle(name, loaded.bundle.get());
    return loaded;
  };
  return options;
}

shm::ModelStatusData ModelStatus(const Fixture& f, uint32_t index) {
  for (int i = 0; i < 400; ++i) {
    Result<shm::StatusSnapshotData> s = shm::ReadStatus(f.segment, f.segment.WorkerSlot(0));
    if (s.ok() && s->num_models > index) {
      return s->models[index];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL("model index " << index << " never appeared");
  return {};
}

TEST_CASE(
    "models loaded live serve at the next indices; an unload decoded before its load "
    "was applied still unloads it") {
  auto backend = std::make_shared<Backend*>(nullptr);
  Fixture f(LoadingOptions(backend));
  *backend = &f.backend;
  // All three decoded in the loop's first turn, before any load is applied.
  shm::ControlMessage load{shm::ControlCode::kLoadModel, 2, 0, 0};
  load.name = "mlp2";
  REQUIRE(testing::SendControl(f.segment, f.segment.WorkerSlot(0), load));
  REQUIRE(testing::SendControl(f.segment, f.segment.WorkerSlot(0),
                               {shm::ControlCode::kUnloadModel, 2, 0, 0}));
  load.model = 3;
  load.name = "mlp3";
  REQUIRE(testing::SendControl(f.segment, f.segment.WorkerSlot(0), load));
  f.Start();
  NodeDriver driver(f.segment, 0);
  shm::ModelStatusData ready = ModelStatus(f, 3);
  for (int i = 0; i < 400 && ready.state != static_cast<uint32_t>(shm::ModelLoadState::kReady);
       ++i) {
    ready = ModelStatus(f, 3);
  }
  CHECK(ready.state == static_cast<uint32_t>(shm::ModelLoadState::kReady));
  CHECK(std::string(ready.name) == "mlp3");
  shm::ModelStatusData gone = ModelStatus(f, 2);
  CHECK(gone.state == static_cast<uint32_t>(shm::ModelLoadState::kUnloaded));
  CHECK(std::string(gone.name) == "(unloaded 2)");
  // The unloaded index is refused NOT_FOUND; the loaded one serves.
  std::vector<uint8_t> row(784 * 4);
  REQUIRE(driver.Submit(2, 0, 1, {{DType::kF32, {1, 784}, row}}).ok());
  REQUIRE(driver.Submit(3, 0, 1, {{DType::kF32, {1, 784}, row}}).ok());
  std::vector<Completion> done;
  for (int i = 0; i < 5000 && done.size() < 2; ++i) {
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  REQUIRE(done.size() == 2);  // The refusal comes at once, the run after its batch.
  CHECK(done[0].code() == ErrorCode::kNotFound);
  CHECK(done[1].status == 0);
}

TEST_CASE("a model loaded live is warmed up before its first request, as at start") {
  auto backend = std::make_shared<Backend*>(nullptr);
  Fixture f(LoadingOptions(backend));
  *backend = &f.backend;
  f.Start();
  CHECK(f.backend.executed.load() == 0);
  shm::ControlMessage load{shm::ControlCode::kLoadModel, 2, 0, 0};
  load.name = "mlp2";
  REQUIRE(testing::SendControl(f.segment, f.segment.WorkerSlot(0), load));
  shm::ModelStatusData ready = ModelStatus(f, 2);
  for (int i = 0; i < 400 && ready.state != static_cast<uint32_t>(shm::ModelLoadState::kReady);
       ++i) {
    ready = ModelStatus(f, 2);
  }
  REQUIRE(ready.state == static_cast<uint32_t>(shm::ModelLoadState::kReady));
  // Twice at each of the MLP's five compiled sizes, before any request; none a dispatch.
  CHECK(f.backend.executed.load() == 2 * 5);
  CHECK(ready.dispatch_count == 0);
}

}  // namespace
}  // namespace ferry::worker

namespace ferry::worker {
namespace {

std::vector<Completion> WaitFor(NodeDriver& driver, size_t count) {
  std::vector<Completion> done;
  for (int i = 0; i < 5000 && done.size() < count; ++i) {
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  return done;
}

TEST_CASE("a cancel takes a queued request out (CANCELLED, counted); one executing runs on") {
  Fixture f(NoPlanAhead());  // The queued requests stay queued while the first executes.
  f.Start();
  NodeDriver driver(f.segment, 0);
  auto submit = [&] { return SubmitCnn(driver); };
  uint64_t running = submit();  // A cnn batch executes for 150 ms.
  WaitDispatched(f, 1);
  uint64_t cancelled = submit();
  uint64_t kept = submit();
  REQUIRE(driver.Cancel(kCnn, cancelled));
  REQUIRE(driver.Cancel(kCnn, running));     // Executing: too late, it runs.
  REQUIRE(driver.Cancel(kMlp, kept));        // The wrong model: not this request's.
  REQUIRE(driver.Cancel(kCnn, kept + 100));  // No such request.
  std::vector<Completion> done = WaitFor(driver, 3);
  REQUIRE(done.size() == 3);
  // The cancelled one is answered at once, before the batch executing finishes.
  CHECK(done[0].sequence == cancelled);
  CHECK(done[0].code() == ErrorCode::kCancelled);
  CHECK(done[0].message.find("cancelled while queued") != std::string::npos);
  CHECK(done[1].sequence == running);
  CHECK(done[1].status == 0);
  CHECK(done[2].sequence == kept);
  CHECK(done[2].status == 0);
  shm::ModelStatusData cnn = ModelStatus(f, kCnn);
  for (int i = 0; i < 2000 && (cnn.requests_served < 2 || cnn.outstanding != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    cnn = ModelStatus(f, kCnn);
  }
  CHECK(cnn.cancelled == 1);
  CHECK(cnn.requests_served == 2);
  CHECK(cnn.outstanding == 0);
  // The statistics extension's counts: two answered OK after their own 150 ms batch each.
  CHECK(cnn.answers.ok_requests == 2);
  CHECK(cnn.answers.failed_requests == 1);
  CHECK(cnn.answers.compute_ns >= 200'000'000);
  CHECK(cnn.answers.ok_ns >= cnn.answers.compute_ns);
  CHECK(cnn.answers.batches[0].executions + cnn.answers.batches[1].executions == 2);
  // Cancels are not invalid descriptors, even when they find nothing.
  CHECK(shm::ReadStatus(f.segment, f.segment.WorkerSlot(0)).value().invalid_descriptors == 0);
}

TEST_CASE("on the host's CPUs the next batch is decided when the running one ends, with all") {
  for (bool on_host_cpus : {true, false}) {
    CAPTURE(on_host_cpus);
    Fixture f;  // Planning ahead allowed.
    f.backend.on_host_cpus = on_host_cpus;
    f.Start();
    NodeDriver driver(f.segment, 0);
    uint64_t running = SubmitCnn(driver);  // A cnn batch executes for 150 ms.
    WaitDispatched(f, 1);
    uint64_t second = SubmitCnn(driver);
    // The loop has taken the second (queued, or decided ahead) before the third comes.
    shm::ModelStatusData cnn = ModelStatus(f, kCnn);
    for (int i = 0; i < 2000 && cnn.outstanding < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      cnn = ModelStatus(f, kCnn);
    }
    REQUIRE(cnn.outstanding == 2);
    uint64_t third = SubmitCnn(driver);
    std::vector<Completion> done = WaitFor(driver, 3);
    REQUIRE(done.size() == 3);
    CHECK(done[0].sequence == running);
    CHECK(done[0].batch_size == 1);
    CHECK(done[1].sequence == second);
    CHECK(done[2].sequence == third);
    // On the host's CPUs the two that came while the first ran share one batch; elsewhere the
    // second was decided ahead, alone, and the third waited for a batch of its own.
    int expected = on_host_cpus ? 2 : 1;
    CHECK(done[1].batch_size == expected);
    CHECK(done[2].batch_size == expected);
    uint64_t dispatches = on_host_cpus ? 2 : 3;
    cnn = ModelStatus(f, kCnn);
    for (int i = 0; i < 2000 && cnn.dispatch_count < dispatches; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      cnn = ModelStatus(f, kCnn);
    }
    CHECK(cnn.dispatch_count == dispatches);
  }
}

TEST_CASE("on the host's CPUs a batch whose recent runs were short runs on the loop's thread") {
  struct Case {
    bool on_host_cpus;
    int64_t run_here_max_ns;
    int expected;
  };
  // mlp's batches take 200 us, cnn's 150 ms. The first mlp batch has no run at its size yet, so
  // it goes to the execution thread; the next two run here. Never a cnn batch, never off the
  // host's CPUs, never with the option off.
  for (Case c : {Case{true, 1'000'000, 2}, Case{false, 1'000'000, 0}, Case{true, 0, 0}}) {
    CAPTURE(c.on_host_cpus);
    CAPTURE(c.run_here_max_ns);
    DispatchLoopOptions options;
    options.run_here_max_ns = c.run_here_max_ns;
    Fixture f(options);
    f.backend.on_host_cpus = c.on_host_cpus;
    f.Start();
    NodeDriver driver(f.segment, 0);
    for (uint32_t model : {kMlp, kMlp, kMlp, kCnn, kCnn}) {
      std::vector<Completion> done = RunOne(driver, model);
      CHECK(done[0].status == 0);
    }
    CHECK(f.backend.ran_here.load() == c.expected);
  }
}

TEST_CASE("queued requests run by priority level, then age; execution time is split by tenant") {
  Fixture f(NoPlanAhead());
  f.Start();
  NodeDriver driver(f.segment, 0);
  auto submit = [&](uint32_t priority, uint32_t tenant) {
    return SubmitCnn(driver, 0, priority, tenant);
  };
  submit(0, 0);  // Executes while the others queue.
  WaitDispatched(f, 1);
  uint64_t background = submit(3, 1);
  uint64_t normal = submit(0, 2);  // 0: the default level, 2.
  uint64_t urgent = submit(1, 2);
  uint64_t normal_later = submit(2, 2);
  std::vector<Completion> done = WaitFor(driver, 5);
  REQUIRE(done.size() == 5);
  // One batch (they coalesce) in queue order: level 1, then level 2 by age, then level 3.
  std::vector<uint64_t> order;
  for (size_t i = 1; i < done.size(); ++i) {
    CHECK(done[i].status == 0);
    order.push_back(done[i].sequence);
  }
  CHECK(order == std::vector<uint64_t>{urgent, normal, normal_later, background});
  shm::StatusSnapshotData s = shm::ReadStatus(f.segment, f.segment.WorkerSlot(0)).value();
  for (int i = 0; i < 2000 && s.tenant_requests[1] + s.tenant_requests[2] < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = shm::ReadStatus(f.segment, f.segment.WorkerSlot(0)).value();
  }
  CHECK(s.tenant_requests[0] == 1);
  CHECK(s.tenant_requests[1] == 1);
  CHECK(s.tenant_requests[2] == 3);
  // The second batch's time, split by rows: tenant 2 had 3 of its 4 rows.
  CHECK(s.tenant_compute_seconds[2] == doctest::Approx(3 * s.tenant_compute_seconds[1]));
  CHECK(s.tenant_compute_seconds[0] > 0.1);  // The first batch, alone: 150 ms.
}

TEST_CASE("fifo serves requests drained in one pass in their ring order, not by model name") {
  SchedulerConfig config;
  config.discipline = Discipline::kFifo;
  Fixture f(NoPlanAhead(), config);
  NodeDriver driver(f.segment, 0);
  // Both wait in the ring before the loop starts, so its first pass drains them together:
  // the mlp (queued first) must run first, though "cnn" sorts before "mlp".
  static const std::vector<uint8_t> row(784 * 4);
  Result<uint64_t> first = driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, row}});
  REQUIRE(first.ok());
  uint64_t second = SubmitCnn(driver);
  f.Start();
  std::vector<Completion> done = WaitFor(driver, 2);
  REQUIRE(done.size() == 2);
  CHECK(done[0].sequence == *first);
  CHECK(done[1].sequence == second);
  CHECK(done[0].status == 0);
  CHECK(done[1].status == 0);
}

}  // namespace
}  // namespace ferry::worker
