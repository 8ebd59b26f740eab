// ferry-worker as a real process: this test is the supervisor (it creates the segment, starts
// the worker with fork + exec, resets slots) and one or two hook hosts (NodeDriver) speaking
// the ring protocol. CPU workers check outputs against CpuBackend run directly; Sim workers
// check scheduling behaviour (deadlines, full queues, set_policy) in real time.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "tests/testing/worker_node.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"

namespace ferry {
namespace {

using testing::Completion;
using testing::kBroken;
using testing::kCnn;
using testing::kMlp;
using testing::Node;
using testing::NodeDriver;
using testing::NodeFile;
using testing::PollUntil;
using testing::RandomFloats;
using testing::TensorInput;

TEST_CASE(
    "a CPU worker process serves 10,000 mixed requests of two models exactly as "
    "CpuBackend does directly") {
  testing::TempDir dir;
  Node node(NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 120));

  // The broken bundle is reported failed; the others serve.
  shm::StatusSnapshotData status = node.Status();
  REQUIRE(status.num_models == 3);
  CHECK(std::string(status.models[kBroken].name) == "broken");
  CHECK(status.models[kBroken].state == static_cast<uint32_t>(shm::ModelLoadState::kFailed));
  CHECK(std::string(status.models[kBroken].error).find("manifest") != std::string::npos);
  CHECK(status.models[kMlp].state == static_cast<uint32_t>(shm::ModelLoadState::kReady));

  // Expected outputs: CpuBackend run directly, one request per batch.
  Result<std::vector<RepositoryModel>> repo = LoadRepository(dir / "models");
  REQUIRE(repo.ok());
  CpuBackend direct(CpuOptions{CpuMode::kFast, 1});
  ModelHandle cnn = direct.Load(*(*repo)[kCnn].bundle).value();
  ModelHandle mlp = direct.Load(*(*repo)[kMlp].bundle).value();
  struct Case {
    uint32_t model;
    int64_t rows;
    Shape shape;
    std::vector<uint8_t> input;
    std::vector<uint8_t> expected;
  };
  std::mt19937 rng(7);
  std::vector<Case> cases;
  for (int64_t rows : {1, 2, 3, 5, 8, 13}) {
    for (int k = 0; k < 4; ++k) {
      Case c{kMlp, rows, {rows, 784}, RandomFloats(static_cast<size_t>(rows) * 784, rng), {}};
      c.expected.resize(static_cast<size_t>(rows) * 10 * 4);
      int64_t size = rows <= 1 ? 1 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16;
      BatchJob job{0, size, {{rows, {c.input}, {c.expected}}}};
      REQUIRE(direct.Execute(mlp, job).ok());
      cases.push_back(std::move(c));
    }
  }
  for (int64_t rows : {1, 2, 3}) {
    for (int k = 0; k < 4; ++k) {
      Case c{
          kCnn, rows, {rows, 3, 32, 32}, RandomFloats(static_cast<size_t>(rows) * 3072, rng), {}};
      c.expected.resize(static_cast<size_t>(rows) * 10 * 4);
      BatchJob job{0, rows == 3 ? 4 : rows, {{rows, {c.input}, {c.expected}}}};
      REQUIRE(direct.Execute(cnn, job).ok());
      cases.push_back(std::move(c));
    }
  }

  NodeDriver driver(node.segment, 0);
  constexpr int kRequests = 10000;
  std::map<uint64_t, size_t> case_of;
  std::vector<Completion> done;
  std::uniform_int_distribution<size_t> pick(0, cases.size() - 1);
  int submitted = 0;
  size_t checked = 0, wrong = 0, failed = 0;
  uint32_t max_queue_us = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while ((submitted < kRequests || driver.inflight() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    while (submitted < kRequests && driver.inflight() < 48) {
      size_t k = pick(rng);
      // Three of four requests go to the cheap MLP.
      if (cases[k].model == kCnn && rng() % 3 != 0) {
        continue;
      }
      const Case& c = cases[k];
      Result<uint64_t> seq = driver.Submit(c.model, 0, c.rows, {{DType::kF32, c.shape, c.input}});
      if (!seq.ok()) {
        break;
      }
      case_of[*seq] = k;
      ++submitted;
    }
    driver.Wait(1'000'000);
    driver.Poll(&done);
    for (; checked < done.size(); ++checked) {
      const Completion& got = done[checked];
      const Case& c = cases[case_of.at(got.sequence)];
      if (got.status != 0 || got.outputs.size() != 1) {
        ++failed;
        MESSAGE("request failed: " << got.message);
        continue;
      }
      const std::vector<uint8_t>& out = got.outputs[0];
      CHECK(got.shapes[0] == Shape{c.rows, 10});
      wrong += testing::SameFloats(out, c.expected) ? 0 : 1;
      // The worker's report: a compiled size holding the request, and a measured execution.
      CHECK(got.batch_size >= c.rows);
      CHECK(got.compute_us > 0);
      max_queue_us = std::max(max_queue_us, got.queue_us);
    }
  }
  CHECK(submitted == kRequests);
  CHECK(max_queue_us > 0);  // 48 in flight: some waited behind a batch.
  CHECK(done.size() == static_cast<size_t>(kRequests));
  CHECK(failed == 0);
  CHECK(wrong == 0);
  CHECK(driver.invalid_completions() == 0);
  status = node.StatusWhen([](const auto& s) {
    return s.models[kMlp].requests_served + s.models[kCnn].requests_served >= kRequests;
  });
  CHECK(status.models[kMlp].requests_served + status.models[kCnn].requests_served ==
        static_cast<uint64_t>(kRequests));
  // Every request answered: nothing outstanding for the gateway to count.
  status = node.StatusWhen(
      [](const auto& s) { return s.models[kMlp].outstanding + s.models[kCnn].outstanding == 0; });
  CHECK(status.models[kMlp].outstanding == 0);
  CHECK(status.models[kCnn].outstanding == 0);
  // Coalescing happened: fewer executions than requests.
  CHECK(status.dispatches < static_cast<uint64_t>(kRequests));
  CHECK(node.Stop() == 0);
}

TEST_CASE("hostile and impossible submissions are answered at once with the cause") {
  testing::TempDir dir;
  Node node(NodeFile(dir, "backend = \"sim\"\n[sim]\nfixed_us = 100\nper_row_us = 0\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  NodeDriver driver(node.segment, 0);
  std::vector<uint8_t> input(784 * 4);
  std::vector<Completion> done;

  // A wrong shape, a variant that does not exist, the broken model, a tensor outside the
  // partition, and a request claiming another slot's id.
  uint64_t wrong_shape =
      driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 783}, {input.data(), 783 * 4}}}).value();
  uint64_t no_variant = driver.Submit(kMlp, 5, 1, {{DType::kF32, {1, 784}, input}}).value();
  uint64_t broken = driver.Submit(kBroken, 0, 1, {{DType::kF32, {1, 784}, input}}).value();
  shm::DescriptorData outside{};
  outside.kind = static_cast<uint16_t>(shm::DescriptorKind::kSubmit);
  outside.slot = driver.slot();
  outside.generation = node.segment.generation(driver.slot()).load();
  outside.model = kMlp;
  outside.rows = 1;
  outside.num_tensors = 1;
  int64_t shape[] = {1, 784};
  outside.tensors[0] = shm::MakeTensorRef(driver.slot(), node.segment.partition_bytes() - 256,
                                          784 * 4, DType::kF32, shape);
  uint64_t out_of_bounds = driver.Push(outside).value();
  PollUntil(driver, &done, [&] { return done.size() == 4; });
  REQUIRE(done.size() == 4);
  std::map<uint64_t, const Completion*> by_seq;
  for (const Completion& c : done) {
    by_seq[c.sequence] = &c;
  }
  CHECK(by_seq.at(wrong_shape)->code() == ErrorCode::kInvalidArgument);
  CHECK(by_seq.at(wrong_shape)->message.find("input 'input'") != std::string::npos);
  CHECK(by_seq.at(no_variant)->message.find("no shape variant 5") != std::string::npos);
  CHECK(by_seq.at(broken)->message.find("manifest") != std::string::npos);
  CHECK(by_seq.at(out_of_bounds)->code() == ErrorCode::kInvalidArgument);
  CHECK(by_seq.at(out_of_bounds)->message.find("exceeds the partition") != std::string::npos);
  // The worker carries on serving.
  done.clear();
  uint64_t good = driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).value();
  PollUntil(driver, &done, [&] { return done.size() == 1; });
  REQUIRE(done.size() == 1);
  CHECK(done[0].sequence == good);
  CHECK(done[0].status == 0);
  CHECK(node.StatusWhen([](const auto& s) { return s.invalid_descriptors > 0; })
            .invalid_descriptors == 1);
  CHECK(node.Stop() == 0);
}

TEST_CASE("deadlines that pass in the queue are shed before execution") {
  testing::TempDir dir;
  // Every dispatch takes 20 ms.
  Node node(NodeFile(dir,
                     "backend = \"sim\"\n[sim]\nfixed_us = 20000\nper_row_us = 0\n"
                     "[scheduler]\ndiscipline = \"fifo\"\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  NodeDriver driver(node.segment, 0);
  std::vector<uint8_t> input(784 * 4);
  std::vector<Completion> done;
  // One request without a deadline occupies the executor; those behind it (fifo) cannot
  // start before it ends, 20 ms or more after `start`. Their deadline is 10 ms after `start`
  // whenever this thread gets to submit them (a late submission arrives already expired).
  int64_t start = MonotonicNs();
  REQUIRE(driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (int i = 0; i < 20; ++i) {
    REQUIRE(driver
                .Submit(kCnn, 0, 1, {{DType::kF32, {1, 3, 32, 32}, std::vector<uint8_t>(3072 * 4)}},
                        start + 10'000'000)
                .ok());
  }
  PollUntil(driver, &done, [&] { return done.size() == 21; });
  REQUIRE(done.size() == 21);
  int shed = 0, ok = 0;
  for (const Completion& c : done) {
    if (c.status == 0) {
      ++ok;
    } else {
      CHECK(c.code() == ErrorCode::kDeadlineExceeded);
      CHECK(c.message.find("model 'cnn'") != std::string::npos);
      ++shed;
    }
  }
  CHECK(ok == 1);
  CHECK(shed == 20);
  CHECK(
      node.StatusWhen([](const auto& s) { return s.models[kCnn].shed >= 20; }).models[kCnn].shed ==
      20);
  CHECK(node.Status().dispatches == 1);  // Only the MLP request executed.
  CHECK(node.Stop() == 0);
}

TEST_CASE("a full queue answers RESOURCE_EXHAUSTED at once") {
  testing::TempDir dir;
  Node node(NodeFile(dir,
                     "backend = \"sim\"\n[sim]\nfixed_us = 1000000\nper_row_us = 0\n"
                     "[scheduler]\nmax_queue_depth = 4\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  NodeDriver driver(node.segment, 0);
  std::vector<uint8_t> input(784 * 4);
  std::vector<Completion> done;
  int64_t start = MonotonicNs();
  for (int i = 0; i < 40; ++i) {
    REQUIRE(driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).ok());
  }
  PollUntil(driver, &done, [&] { return done.size() == 40; });
  REQUIRE(done.size() == 40);
  int rejected = 0;
  for (const Completion& c : done) {
    if (c.status != 0) {
      CHECK(c.code() == ErrorCode::kResourceExhausted);
      CHECK(c.message.find("mlp") != std::string::npos);
      // Answered without waiting for an execution (each takes a second; the bound leaves a
      // stalled test thread or worker half of one).
      CHECK(c.completed_ns - start < 500'000'000);
      ++rejected;
    }
  }
  // All 40 are pushed within microseconds, long before the first 1 s execution ends: at
  // most one batch in flight, one planned (each at most the four a queue held) and four
  // queued can hold requests, so at least 28 are refused.
  CHECK(rejected >= 28);
  CHECK(rejected > 0);
  CHECK(node.StatusWhen([&](const auto& s) { return s.models[kMlp].rejected >= 1; })
            .models[kMlp]
            .rejected == static_cast<uint64_t>(rejected));
  CHECK(node.Stop() == 0);
}

// A second hook host that submits until it is killed.
[[noreturn]] void RunDoomedDriver(const std::string& name) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // Never outlive a failed test.
  shm::Segment segment = shm::Segment::Attach(name, 1).value();
  NodeDriver driver(segment, 1, false);
  std::vector<uint8_t> input(784 * 4);
  std::vector<Completion> done;
  for (;;) {
    while (driver.inflight() < 64 &&
           driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).ok()) {
    }
    driver.Poll(&done);
    done.clear();
  }
}

TEST_CASE("a driver killed mid-traffic loses only its own requests; its blocks are reaped") {
  testing::TempDir dir;
  Node node(NodeFile(dir, "backend = \"sim\"\n[sim]\nfixed_us = 100\nper_row_us = 5\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  pid_t doomed = fork();
  if (doomed == 0) {
    RunDoomedDriver(node.name);
  }
  NodeDriver driver(node.segment, 0);
  std::vector<uint8_t> input(784 * 4);
  std::vector<Completion> done;
  constexpr int kRequests = 3000;
  int submitted = 0;
  bool killed = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((submitted < kRequests || driver.inflight() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    while (submitted < kRequests && driver.inflight() < 32 &&
           driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).ok()) {
      ++submitted;
    }
    if (!killed && submitted > kRequests / 3) {
      // The doomed driver has traffic in flight now: kill it and recover its slot, as
      // ferryd does.
      REQUIRE(node.Status().models[kMlp].requests_served > 0);
      kill(doomed, SIGKILL);
      waitpid(doomed, nullptr, 0);
      shm::ResetSlot(node.segment, node.segment.HookhostSlot(1));
      killed = true;
    }
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  REQUIRE(killed);
  CHECK(done.size() == static_cast<size_t>(kRequests));
  for (const Completion& c : done) {
    CHECK(c.status == 0);
  }
  // Every block the worker lent the dead incarnation is reaped; ours are all released.
  bool clean = false;
  for (int i = 0; i < 400 && !clean; ++i) {
    clean = shm::ReadArenaStats(node.segment, node.worker_slot).bytes_in_use == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(clean);
  CHECK(node.Stop() == 0);
}

TEST_CASE("set_policy through the control ring changes the shares of a running worker") {
  testing::TempDir dir;
  // Equal costs per dispatch; both models always backlogged.
  Node node(NodeFile(dir, "backend = \"sim\"\n[sim]\nfixed_us = 2000\nper_row_us = 0\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  NodeDriver driver(node.segment, 0, false);
  // Eight-row requests, 16 batches deep per model: 32 ms of backlog each, so a driver stalled
  // for a few milliseconds on a loaded machine still finds both queues backlogged (an emptied
  // queue gives up its share, as fair queueing should).
  std::vector<uint8_t> mlp_input(8 * 784 * 4), cnn_input(8 * 3072 * 4);
  std::vector<Completion> done;
  int mlp_inflight = 0, cnn_inflight = 0;
  std::map<uint64_t, uint32_t> model_of;
  auto run_for = [&](int ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      while (mlp_inflight < 64) {
        model_of[driver.Submit(kMlp, 0, 8, {{DType::kF32, {8, 784}, mlp_input}}).value()] = kMlp;
        ++mlp_inflight;
      }
      while (cnn_inflight < 64) {
        model_of[driver.Submit(kCnn, 0, 8, {{DType::kF32, {8, 3, 32, 32}, cnn_input}}).value()] =
            kCnn;
        ++cnn_inflight;
      }
      driver.Wait(1'000'000);
      driver.Poll(&done);
      for (const Completion& c : done) {
        REQUIRE(c.status == 0);
        (model_of.at(c.sequence) == kMlp ? mlp_inflight : cnn_inflight) -= 1;
      }
      done.clear();
    }
  };
  auto compute = [&] {
    shm::StatusSnapshotData s = node.Status();
    return std::pair{s.models[kMlp].total_compute_seconds, s.models[kCnn].total_compute_seconds};
  };
  run_for(300);
  // Outstanding counts what the worker holds: queued or executing, never more than sent.
  shm::StatusSnapshotData busy = node.Status();
  CHECK(busy.models[kMlp].outstanding > 0);
  CHECK(busy.models[kMlp].outstanding <= 64);
  CHECK(busy.models[kCnn].outstanding > 0);
  CHECK(busy.models[kCnn].outstanding <= 64);
  auto a = compute();
  run_for(800);
  auto b = compute();
  double before = (b.first - a.first) / (b.second - a.second);
  CHECK(before == doctest::Approx(1.0).epsilon(0.25));
  REQUIRE(testing::SendControl(node.segment, node.worker_slot,
                               {shm::ControlCode::kSetPolicy, kMlp, 3.0, 0}));
  run_for(300);
  auto c = compute();
  run_for(800);
  auto d = compute();
  double after = (d.first - c.first) / (d.second - c.second);
  CHECK(after == doctest::Approx(3.0).epsilon(0.2));
  CHECK(node.Status().models[kMlp].weight == 3.0);
  CHECK(node.Stop() == 0);
}

// Submits `count` one-row mlp requests and returns the worker's status once it has taken all
// of them in (queued, or dispatched: requests_served counts a batch when it is decided). The
// worker reads its control ring before its submissions, so a control message sent after this
// finds them all in the worker, however late this thread or the worker ran.
shm::StatusSnapshotData SubmitTakenIn(const Node& node, NodeDriver& driver, uint64_t count) {
  static const std::vector<uint8_t> input(784 * 4);
  for (uint64_t i = 0; i < count; ++i) {
    REQUIRE(driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).ok());
  }
  shm::StatusSnapshotData s = node.StatusWhen([&](const auto& st) {
    return st.models[kMlp].queue_depth + st.models[kMlp].requests_served == count;
  });
  REQUIRE(s.models[kMlp].queue_depth + s.models[kMlp].requests_served == count);
  return s;
}

TEST_CASE("drain serves every queued request, refuses new ones, then exits 0") {
  testing::TempDir dir;
  // One request per 100 ms batch: the drain takes a second, so the request sent after it
  // reaches a worker that is still draining unless this thread stalls for most of a second.
  Node node(NodeFile(dir,
                     "backend = \"sim\"\n[sim]\nfixed_us = 100000\nper_row_us = 0\n"
                     "[scheduler.models.mlp]\nmax_batch_size = 1\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  NodeDriver driver(node.segment, 0);
  std::vector<uint8_t> input(784 * 4);
  std::vector<Completion> done;
  REQUIRE(SubmitTakenIn(node, driver, 10).models[kMlp].outstanding > 0);
  REQUIRE(
      testing::SendControl(node.segment, node.worker_slot, {shm::ControlCode::kDrain, 0, 0, 0}));
  REQUIRE(node.StatusWhen([](const auto& s) {
                return s.state == static_cast<uint32_t>(shm::ProcessState::kDraining);
              })
              .state == static_cast<uint32_t>(shm::ProcessState::kDraining));
  REQUIRE(driver.Submit(kMlp, 0, 1, {{DType::kF32, {1, 784}, input}}).ok());
  PollUntil(driver, &done, [&] { return done.size() == 11; });
  REQUIRE(done.size() == 11);
  int ok = 0, refused = 0;
  for (const Completion& c : done) {
    c.status == 0 ? ++ok : (c.code() == ErrorCode::kUnavailable ? ++refused : 0);
  }
  CHECK(ok == 10);
  CHECK(refused == 1);
  int status = 0;
  REQUIRE(waitpid(node.worker, &status, 0) == node.worker);
  node.worker = -1;
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("stop answers every request: the batches begun finish, the queued are UNAVAILABLE") {
  testing::TempDir dir;
  Node node(NodeFile(dir,
                     "backend = \"sim\"\n[sim]\nfixed_us = 200000\nper_row_us = 0\n"
                     "[scheduler.models.mlp]\nmax_batch_size = 1\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 60));
  NodeDriver driver(node.segment, 0);
  std::vector<Completion> done;
  // Stop once a batch has begun (200 ms each, one request each), not after a sleep.
  REQUIRE(SubmitTakenIn(node, driver, 10).dispatches >= 1);
  REQUIRE(testing::SendControl(node.segment, node.worker_slot, {shm::ControlCode::kStop, 0, 0, 0}));
  PollUntil(driver, &done, [&] { return done.size() == 10; });
  REQUIRE(done.size() == 10);
  int ok = 0, unavailable = 0;
  for (const Completion& c : done) {
    c.status == 0 ? ++ok : (c.code() == ErrorCode::kUnavailable ? ++unavailable : 0);
  }
  CHECK(ok >= 1);  // The batch executing when stop arrived.
  CHECK(ok + unavailable == 10);
  CHECK(unavailable >= 7);
  int status = 0;
  REQUIRE(waitpid(node.worker, &status, 0) == node.worker);
  node.worker = -1;
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace ferry
