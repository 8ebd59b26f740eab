// How the dispatch loop waits: after work it polls its rings for spin_ns, so that a request
// following at once is taken without a sleep and wake-up; idle, it sleeps.
#include <doctest/doctest.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "shm/ring.h"
#include "tests/testing/loop_fixture.h"

namespace ferry::worker {
namespace {

using testing::Completion;
using testing::kMlp;
using testing::LoopFixture;
using testing::NodeDriver;
using testing::RunOne;

// Counts the loop thread's announcements that it is about to sleep (WaitForWork's hook).
struct SleepCounter {
  std::atomic<int> sleeps{0};
  shm::WaitHooks hooks;
  SleepCounter() {
    hooks.before_announce = [this] { sleeps.fetch_add(1); };
  }
  std::function<void()> Install() {
    return [this] { shm::SetWaitHooksForTest(&hooks); };
  }
};

// `idle_ns`: the heartbeat's wake-up while idle.
DispatchLoopOptions Spinning(int64_t spin_ns, int64_t idle_ns) {
  DispatchLoopOptions options;
  options.spin_ns = spin_ns;
  options.idle_sleep_ns = idle_ns;
  options.rest_sleep_ns = idle_ns;
  return options;
}

// Sleeps announced by the loop from one answer to the next; the second request is sent
// `gap_ms` after the first answer, or as soon as the loop announces a sleep.
int SleepsBetweenRequests(int64_t spin_ns, int gap_ms) {
  SleepCounter counter;
  LoopFixture f(Spinning(spin_ns, 2'000'000'000));  // No heartbeat wake inside.
  f.Start(counter.Install());
  NodeDriver driver(f.segment, 0);
  REQUIRE(RunOne(driver, kMlp)[0].status == 0);
  int before = counter.sleeps.load();
  for (int i = 0; i < gap_ms && counter.sleeps.load() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(RunOne(driver, kMlp)[0].status == 0);
  return counter.sleeps.load() - before;
}

TEST_CASE("after work the loop polls for spin_ns: a request that follows finds it awake") {
  // Sent 20 ms later: a second of polling outlasts any delay of this thread on a loaded
  // machine.
  CHECK(SleepsBetweenRequests(1'000'000'000, 20) == 0);
  // The same exchange without polling sleeps in between (waited for up to 5 s, however late
  // the loop's thread runs): the check above can fail.
  CHECK(SleepsBetweenRequests(0, 5000) >= 1);
}

TEST_CASE("the poll is bounded: with no work for spin_ns the loop sleeps, and stays asleep") {
  SleepCounter counter;
  LoopFixture f(Spinning(30'000'000, 10'000'000));
  f.Start(counter.Install());
  NodeDriver driver(f.segment, 0);
  REQUIRE(RunOne(driver, kMlp)[0].status == 0);
  int before = counter.sleeps.load();
  for (int i = 0; i < 5000 && counter.sleeps.load() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(counter.sleeps.load() > before);  // The 30 ms poll ended in a sleep.
  // Woken since only by its heartbeat, every 10 ms, it never polls again: an idle loop
  // sleeps. Its CPU time over a quiet 100 ms is far below what a 30 ms poll per wake-up takes
  // (about 75 ms).
  timespec start{}, end{};
  clockid_t clock;
  REQUIRE(pthread_getcpuclockid(f.thread.native_handle(), &clock) == 0);
  clock_gettime(clock, &start);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  clock_gettime(clock, &end);
  int64_t cpu_ns = (end.tv_sec - start.tv_sec) * 1'000'000'000 + (end.tv_nsec - start.tv_nsec);
  CHECK(cpu_ns < 10'000'000);
}

}  // namespace
}  // namespace ferry::worker
