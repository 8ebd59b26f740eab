// The relay of a hook host's output into ferryd's log: lines prefixed and made printable, long
// ones cut, floods limited per second, and the pipe end to end.
#include "supervisor/log_relay.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace ferry::supervisor {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l;
  return out;
}

TEST_CASE("a child's lines are prefixed, control bytes shown as '?', split reads joined") {
  LineRelay relay("hook host 0| ");
  // A plugin forging one of ferryd's lines, with an escape sequence and a carriage return.
  std::string out = Joined(relay.Feed("2026-12-05 10:00:00.000 error ferryd[1] fo", 5 * kSecond));
  CHECK(out.empty());  // Not a line yet.
  out = Joined(relay.Feed("rged\r\n\x1b[2Jok\ttab\n", 5 * kSecond));
  CHECK(out ==
        "hook host 0| 2026-12-05 10:00:00.000 error ferryd[1] forged?\n"
        "hook host 0| ?[2Jok\ttab\n");
  CHECK(Joined(relay.Feed("no end", 5 * kSecond)).empty());
  CHECK(Joined(relay.Finish(5 * kSecond)) == "hook host 0| no end\n");
}

TEST_CASE("a line past kMaxLineBytes is cut once; the next line is whole") {
  LineRelay relay("h| ");
  std::string huge(3 * kMaxLineBytes, 'x');
  std::vector<std::string> lines = relay.Feed(huge.substr(0, 5000), 0);
  lines = relay.Feed(huge.substr(5000) + "\nnext\n", 0);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "h| next\n");
  LineRelay again("h| ");
  lines = again.Feed(huge + "\n", 0);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "h| " + std::string(kMaxLineBytes, 'x') + " [cut]\n");
}

TEST_CASE("past kMaxLinesPerSecond the rest of the second is dropped and counted") {
  LineRelay relay("h| ");
  std::string flood;
  for (int i = 0; i < 3 * kMaxLinesPerSecond; ++i) flood += "spam\n";
  std::vector<std::string> lines = relay.Feed(flood, 7 * kSecond);
  CHECK(static_cast<int64_t>(lines.size()) == kMaxLinesPerSecond);
  // The next second: the count first, then lines again.
  lines = relay.Feed("later\n", 8 * kSecond);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "h| (ferryd: 400 line(s) dropped, over 200 a second)\n");
  CHECK(lines[1] == "h| later\n");
}

TEST_CASE("LogRelay: what the child writes arrives prefixed; the end of the pipe is seen") {
  Result<LogRelay> relay = LogRelay::Open("w| ");
  REQUIRE(relay.ok());
  int out[2];
  REQUIRE(pipe(out) == 0);
  int writer = dup(relay->write_fd());  // As the child holds it.
  relay->CloseWriteEnd();
  REQUIRE(write(writer, "one\ntwo", 7) == 7);
  CHECK(relay->Pump(out[1], 0));  // Still open.
  close(writer);
  CHECK_FALSE(relay->Pump(out[1], 0));  // Ended, the last line written.
  char buffer[64] = {};
  ssize_t n = read(out[0], buffer, sizeof(buffer));
  CHECK(std::string(buffer, n > 0 ? static_cast<size_t>(n) : 0) == "w| one\nw| two\n");
  close(out[0]);
  close(out[1]);
  // The write end is non-blocking: a full pipe makes the child's write fail, not wait.
  Result<LogRelay> full = LogRelay::Open("f| ");
  REQUIRE(full.ok());
  std::string block(1 << 16, 'x');
  while (write(full->write_fd(), block.data(), block.size()) > 0) {
  }
  CHECK(errno == EAGAIN);
}

}  // namespace
}  // namespace ferry::supervisor
