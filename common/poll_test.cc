// The poll's default: on with 4 or more CPUs, off with fewer, the operator's value otherwise.
#include "common/poll.h"

#include <doctest/doctest.h>
#include <sched.h>

#include <thread>

namespace ferry {
namespace {

TEST_CASE("the poll is on by default with 4 or more CPUs, off with fewer") {
  CHECK(PollMicrosFor(-1, 1) == 0);
  CHECK(PollMicrosFor(-1, 3) == 0);
  CHECK(PollMicrosFor(-1, 4) == kDefaultPollMicros);
  CHECK(PollMicrosFor(-1, 64) == kDefaultPollMicros);
}

TEST_CASE("an operator's value holds whatever the CPUs") {
  CHECK(PollMicrosFor(0, 64) == 0);
  CHECK(PollMicrosFor(50, 1) == 50);
  CHECK(PollMicros(0) == 0);
  CHECK(PollMicros(350) == 350);
}

TEST_CASE("the default reads the calling thread's affinity") {
  int64_t got = -2;
  bool pinned_ok = false;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    pinned_ok = sched_setaffinity(0, sizeof(one), &one) == 0;
    got = PollMicros(-1);
  });
  pinned.join();
  REQUIRE(pinned_ok);
  CHECK(got == 0);  // One CPU: off, whatever the machine has.
}

TEST_CASE("a loop that does not poll does not check its rings before it sleeps either") {
  CHECK(RingChecksFor(PollMicrosFor(-1, 2)) == 0);
  CHECK(RingChecksFor(PollMicrosFor(0, 64)) == 0);
  CHECK(RingChecksFor(PollMicrosFor(-1, 4)) == kPollingRingChecks);
  CHECK(RingChecksFor(PollMicrosFor(1, 2)) == kPollingRingChecks);
}

}  // namespace
}  // namespace ferry
