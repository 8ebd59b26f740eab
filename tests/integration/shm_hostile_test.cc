// Isolation by the MMU, with real processes: a hook host that scribbles random bytes over
// every byte it can reach (ferry-hostile-peer, exec'd like a real child so it holds only its
// own mappings) hurts only itself; the worker (a real ferry-worker on the CPU backend) and the
// other hook host (this process) carry on and every one of their requests completes with the
// right outputs. And a process that scribbled over its whole object before dying leaves
// nothing ResetSlot does not repair: its successor serves.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <map>

#include "tests/testing/worker_node.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"

namespace ferry {
namespace {

using testing::Completion;
using testing::kMlp;
using testing::Node;
using testing::NodeDriver;
using testing::NodeFile;

// Starts ferry-hostile-peer as `slot` (fork + exec). Returns its pid.
pid_t StartHostile(const std::string& segment, uint32_t slot, const char* mode, int ms) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::string slot_text = std::to_string(slot);
    std::string ms_text = std::to_string(ms);
    execl(FERRY_HOSTILE_BINARY, FERRY_HOSTILE_BINARY, segment.c_str(), slot_text.c_str(), mode,
          ms_text.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// MLP requests with the outputs CpuBackend computes for them directly.
struct Cases {
  struct Case {
    int64_t rows;
    std::vector<uint8_t> input;
    std::vector<uint8_t> expected;
  };
  std::vector<Case> cases;

  explicit Cases(const testing::TempDir& dir) {
    Result<std::vector<RepositoryModel>> repo = LoadRepository(dir / "models");
    REQUIRE(repo.ok());
    CpuBackend direct(CpuOptions{CpuMode::kFast, 1});
    ModelHandle mlp = direct.Load(*(*repo)[kMlp].bundle).value();
    std::mt19937 rng(3);
    for (int64_t rows : {1, 2, 5}) {
      for (int k = 0; k < 3; ++k) {
        Case c{rows, testing::RandomFloats(static_cast<size_t>(rows) * 784, rng), {}};
        c.expected.resize(static_cast<size_t>(rows) * 10 * 4);
        BatchJob job{0, rows <= 1 ? 1 : rows <= 4 ? 4 : 8, {{rows, {c.input}, {c.expected}}}};
        REQUIRE(direct.Execute(mlp, job).ok());
        cases.push_back(std::move(c));
      }
    }
  }

  // Runs `count` requests through `driver`, checking each output; returns how many were right.
  int Run(NodeDriver& driver, int count, int timeout_s = 120) {
    std::map<uint64_t, size_t> case_of;
    std::vector<Completion> done;
    int submitted = 0, right = 0;
    size_t checked = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while ((submitted < count || driver.inflight() > 0) &&
           std::chrono::steady_clock::now() < deadline) {
      while (submitted < count && driver.inflight() < 16) {
        size_t k = static_cast<size_t>(submitted) % cases.size();
        const Case& c = cases[k];
        Result<uint64_t> seq =
            driver.Submit(kMlp, 0, c.rows, {{DType::kF32, {c.rows, 784}, c.input}});
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
          MESSAGE("request failed: " << got.message);
          continue;
        }
        right += testing::SameFloats(got.outputs[0], c.expected) ? 1 : 0;
      }
    }
    return right;
  }
};

int WaitStatus(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

TEST_CASE("a hook host scribbling on every byte it can reach hurts only itself") {
  testing::TempDir dir;
  Node node(NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n"));
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 120));
  Cases cases(dir);
  NodeDriver honest(node.segment, 0);
  REQUIRE(cases.Run(honest, 200) == 200);  // Before: the node serves.

  // Hook host 1 scribbles for 1.5 s while hook host 0 keeps submitting.
  pid_t hostile = StartHostile(node.name, node.segment.HookhostSlot(1), "scribble", 1500);
  int during = cases.Run(honest, 1500);
  int status = WaitStatus(hostile);
  // Every write it tried outside its own object faulted; the last one killed it.
  CHECK_MESSAGE(WIFSIGNALED(status), "exit code " << WEXITSTATUS(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  CHECK(during == 1500);
  // The worker saw the garbage (impossible tails it refused to follow), and is healthy.
  uint32_t hostile_ring = node.segment.SubmissionRing(1, 0);
  CHECK(node.segment.ring_head(hostile_ring).invalid_descriptors.load() > 0);
  CHECK(node.Status().state == static_cast<uint32_t>(shm::ProcessState::kReady));

  // ferryd resets the dead slot; a successor on it and the survivor both serve.
  shm::ResetSlot(node.segment, node.segment.HookhostSlot(1));
  NodeDriver successor(node.segment, 1);
  CHECK(cases.Run(successor, 300) == 300);
  CHECK(cases.Run(honest, 300) == 300);
  CHECK(honest.invalid_completions() == 0);
  CHECK(successor.invalid_completions() == 0);
  CHECK(node.Stop() == 0);
}

TEST_CASE("a worker that scribbled over its whole object before dying: its successor serves") {
  testing::TempDir dir;
  std::string config = NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n");
  Node node(config, 1);
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 120));
  Cases cases(dir);
  NodeDriver driver(node.segment, 0);
  REQUIRE(cases.Run(driver, 100) == 100);
  // The worker dies; before dying it wrote random bytes over its heads, tails, descriptors,
  // status, bell and arena (the hostile peer attached as its slot does exactly that).
  kill(node.worker, SIGKILL);
  WaitStatus(node.worker);
  node.worker = -1;
  pid_t scribbler = StartHostile(node.name, node.worker_slot, "exit", 0);
  int status = WaitStatus(scribbler);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  shm::ResetSlot(node.segment, node.worker_slot);
  node.worker = testing::StartWorker(FERRY_WORKER_BINARY, node.name, node.worker_slot, config);
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 120));
  CHECK(cases.Run(driver, 500) == 500);
  CHECK(driver.invalid_completions() == 0);
  CHECK(node.Stop() == 0);
}

TEST_CASE("a hook host that scribbled over its whole object before dying: its successor serves") {
  testing::TempDir dir;
  Node node(NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n"), 1);
  REQUIRE(testing::WaitReady(node.segment, node.worker_slot, node.worker, 120));
  Cases cases(dir);
  pid_t scribbler = StartHostile(node.name, node.segment.HookhostSlot(0), "exit", 0);
  int status = WaitStatus(scribbler);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  shm::ResetSlot(node.segment, node.segment.HookhostSlot(0));
  NodeDriver successor(node.segment, 0);
  CHECK(cases.Run(successor, 500) == 500);
  CHECK(successor.invalid_completions() == 0);
  CHECK(node.Stop() == 0);
}

}  // namespace
}  // namespace ferry
