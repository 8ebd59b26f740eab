#include "common/result.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

namespace ferry {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) {
    return InvalidArgument("odd: " + std::to_string(x));
  }
  return x / 2;
}

Result<int> Quarter(int x) {
  FERRY_ASSIGN_OR_RETURN(int half, Half(x));
  FERRY_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int x) {
  FERRY_RETURN_IF_ERROR(Half(x));
  return OkStatus();
}

TEST_CASE("retry hints: written at the end of a message, read back, hostile ones ignored") {
  CHECK(RetryHint(250) == "retry after 250 ms");
  CHECK(RetryHint(0) == "retry after 1 ms");
  CHECK(RetryAfterMs("model 'm': would wait 90 ms; " + RetryHint(40)) == 40);
  CHECK(RetryAfterMs("retry after 5 ms, then retry after 7 ms") == 7);
  CHECK_FALSE(RetryAfterMs("queue is full").has_value());
  CHECK_FALSE(RetryAfterMs("retry after ms").has_value());
  CHECK_FALSE(RetryAfterMs("retry after 12 s").has_value());
  CHECK_FALSE(RetryAfterMs("retry after 99999999999999999999 ms").has_value());
  CHECK_FALSE(RetryAfterMs("retry after 86400001 ms").has_value());
  CHECK_FALSE(RetryAfterMs("retry after 12").has_value());
}

TEST_CASE("a Result carries either a value or an error with its canonical code") {
  CHECK(Quarter(8).value() == 2);
  Result<int> bad = Quarter(6);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == ErrorCode::kInvalidArgument);
  CHECK(bad.error().ToString() == "INVALID_ARGUMENT: odd: 3");
  CHECK(CheckEven(4).ok());
  CHECK_FALSE(CheckEven(5).ok());
  CHECK(ErrorCodeName(ErrorCode::kResourceExhausted) == "RESOURCE_EXHAUSTED");
  CHECK(ErrorCodeName(ErrorCode::kDeadlineExceeded) == "DEADLINE_EXCEEDED");
}

}  // namespace
// True when `misuse` aborts the process (run in a child, so the test binary survives).
bool Aborts(const std::function<void()>& misuse) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL);  // Not the test framework's crash report.
    if (freopen("/dev/null", "w", stderr) == nullptr ||
        freopen("/dev/null", "w", stdout) == nullptr) {
      _exit(2);  // Silenced output could not be set up: the caller sees no abort.
    }
    misuse();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

TEST_CASE("reading the error of a success or the value of an error aborts in every build") {
  // So `CHECK(s.error().code == ...)` on a Status that is wrongly OK fails the test instead of
  // reading an empty error whose code happens to be INVALID_ARGUMENT.
  CHECK(Aborts([] { (void)OkStatus().error().code; }));
  CHECK(Aborts([] { (void)Result<int>(3).error(); }));
  CHECK(Aborts([] { (void)Result<int>(InvalidArgument("x")).value(); }));
  CHECK(Aborts([] { (void)Result<int>(Internal("x")).value(); }));
  CHECK_FALSE(Aborts([] { (void)Status(Internal("x")).error(); }));
  CHECK_FALSE(Aborts([] { (void)Result<int>(3).value(); }));
}

}  // namespace ferry
