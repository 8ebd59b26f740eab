// Crash recovery of the shared-memory transport with real processes: a hook host or the
// worker is SIGKILLed at random points (mid-allocation, mid-push, mid-read) over many
// iterations (each once it is demonstrably mid-traffic); the supervisor (this process) resets its
// slot and starts a successor. The surviving peer's traffic must complete, nothing may leak, and no
// process may crash.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "tests/integration/shm_peers.h"
#include "tests/testing/shm_name.h"

namespace ferry {
namespace {

using testing::TestHookHost;
using testing::TestWorker;

constexpr int kKills = 40;

struct Node {
  std::string name = testing::UniqueShmName("crash");
  shm::Segment segment = shm::Segment::Create(name, {2, 1, 64, 32 << 20}).value();
  ~Node() { shm::Segment::Remove(name); }
};

// Children attach by name, like real ones, and leave with _exit so no test state unwinds.
constexpr uint32_t kWorkerSlot = 2;  // After the two hook hosts.

// Children attach as their slot: their own object read-write, their peers' read-only.
[[noreturn]] void RunWorker(const std::string& name) {
  shm::Segment segment = shm::Segment::Attach(name, kWorkerSlot).value();
  TestWorker worker(segment);
  while (worker.Step()) {
    worker.Sleep(1'000'000);
  }
  _exit(shm::ReadArenaStats(segment, segment.WorkerSlot(0)).bytes_in_use == 0 ? 0 : 3);
}

[[noreturn]] void RunHookHostForever(const std::string& name, uint32_t hookhost) {
  shm::Segment segment = shm::Segment::Attach(name, hookhost).value();
  TestHookHost host(segment, hookhost);
  for (;;) {
    host.Submit(16);
    host.Poll();
  }
}

// Submits until the supervisor (this test) sends stop on its control ring, then waits for
// every request to resolve, flushes its releases, and reports through its exit code.
[[noreturn]] void RunSurvivor(const std::string& name, uint32_t hookhost,
                              bool expect_all_completed) {
  shm::Segment segment = shm::Segment::Attach(name, hookhost).value();
  TestHookHost host(segment, hookhost);
  shm::RingConsumer control(segment, segment.ControlRing(host.slot()));
  bool stopping = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while ((!stopping || !host.Idle()) && std::chrono::steady_clock::now() < deadline) {
    shm::DescriptorData d{};
    if (!stopping && control.TryPop(&d) == shm::RingStatus::kOk) {
      stopping = true;
    }
    if (!stopping) {
      host.Submit(16);
    }
    host.Poll();
  }
  bool resolved =
      host.Idle() && host.completed() + host.unavailable() + host.errors() == host.submitted();
  bool ok = resolved && host.completed() > 0 && host.wrong() == 0 && host.errors() == 0 &&
            (!expect_all_completed || host.completed() == host.submitted()) &&
            shm::ReadArenaStats(segment, host.slot()).bytes_in_use == 0;
  std::fprintf(stderr, "survivor: submitted %llu completed %llu unavailable %llu wrong %llu\n",
               static_cast<unsigned long long>(host.submitted()),
               static_cast<unsigned long long>(host.completed()),
               static_cast<unsigned long long>(host.unavailable()),
               static_cast<unsigned long long>(host.wrong()));
  _exit(ok ? 0 : 4);
}

template <typename Fn>
pid_t Spawn(Fn fn) {
  pid_t pid = fork();
  if (pid == 0) {
    fn();
  }
  REQUIRE(pid > 0);
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (up to 30 s) until `ring`'s tail has moved `steps` past `from`: the process under
// test is demonstrably mid-traffic when it is killed, however loaded the machine is.
bool WaitForProgress(const shm::Segment& segment, uint32_t ring, uint64_t from, uint64_t steps) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (segment.ring_tail(ring).tail.load() < from + steps) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::yield();
  }
  return true;
}

void KillAndReset(const shm::Segment& segment, pid_t pid, uint32_t slot) {
  kill(pid, SIGKILL);
  CHECK(WaitExit(pid) == 128 + SIGKILL);
  shm::ResetSlot(segment, slot);
}

void Stop(const shm::Segment& segment, uint32_t slot) {
  shm::RingProducer control(segment, segment.ControlRing(slot));
  shm::DescriptorData stop{};
  stop.kind = static_cast<uint16_t>(shm::DescriptorKind::kControl);
  stop.model = testing::kStopCommand;
  REQUIRE(control.TryPush(stop) == shm::RingStatus::kOk);
}

TEST_CASE("a hook host killed at random points is reset; its peer's traffic all completes") {
  Node node;
  std::mt19937 rng(7);
  pid_t worker = Spawn([&] { RunWorker(node.name); });
  pid_t survivor = Spawn([&] { RunSurvivor(node.name, 1, true); });
  uint64_t victim_generations = 1;
  for (int i = 0; i < kKills; ++i) {
    uint32_t ring = node.segment.SubmissionRing(0, 0);
    uint64_t before = node.segment.ring_tail(ring).tail.load();
    pid_t victim = Spawn([&] { RunHookHostForever(node.name, 0); });
    CHECK(WaitForProgress(node.segment, ring, before, 1 + rng() % 32));  // Mid-traffic.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    KillAndReset(node.segment, victim, 0);
    ++victim_generations;
  }
  CHECK(node.segment.generation(0).load() == victim_generations);
  Stop(node.segment, 1);
  CHECK(WaitExit(survivor) == 0);  // Every one of its requests completed, checksums right.
  Stop(node.segment, node.segment.WorkerSlot(0));
  CHECK(WaitExit(worker) == 0);  // The worker reaped every block the dead hook hosts held.
  CHECK(shm::ReadArenaStats(node.segment, node.segment.WorkerSlot(0)).bytes_in_use == 0);
  CHECK(shm::ReadArenaStats(node.segment, 1).bytes_in_use == 0);
}

TEST_CASE("a worker killed at random points is reset; the hook host fails and reclaims") {
  Node node;
  std::mt19937 rng(11);
  uint32_t worker_slot = node.segment.WorkerSlot(0);
  pid_t survivor = Spawn([&] { RunSurvivor(node.name, 1, false); });
  for (int i = 0; i < kKills; ++i) {
    uint32_t ring = node.segment.CompletionRing(0, 1);
    uint64_t before = node.segment.ring_tail(ring).tail.load();
    pid_t worker = Spawn([&] { RunWorker(node.name); });
    CHECK(WaitForProgress(node.segment, ring, before, 1 + rng() % 32));  // Mid-traffic.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    KillAndReset(node.segment, worker, worker_slot);
  }
  pid_t worker = Spawn([&] { RunWorker(node.name); });
  uint32_t ring = node.segment.CompletionRing(0, 1);
  CHECK(WaitForProgress(node.segment, ring, node.segment.ring_tail(ring).tail.load(), 1));
  Stop(node.segment, 1);
  CHECK(WaitExit(survivor) == 0);  // Everything resolved: completed or UNAVAILABLE, no leak.
  Stop(node.segment, worker_slot);
  CHECK(WaitExit(worker) == 0);
}

}  // namespace
}  // namespace ferry
