// The output of a child ferryd does not trust, relayed into ferryd's own log. A hook host runs
// plugins, and a plugin can write anything to its stdout and stderr: inherited as ferryd's,
// that let it forge ferryd's log lines (into its file, or the journal under ferryd's name). A
// hook host's stdout and stderr are instead the write end of a pipe; ferryd reads the other
// end and writes each line to its own stderr prefixed with the child's name ("hook host 0| "),
// with every byte that is not printable ASCII or a tab shown as '?', cut at kMaxLineBytes, and
// at most kMaxLinesPerSecond lines a second (the rest of that second dropped and counted in a
// line of ferryd's own).
//
// The pipe is non-blocking at both ends: a child that writes faster than ferryd reads loses
// lines (its write fails with EAGAIN) instead of stalling.
//
// Thread safety: one thread (ferryd's loop). Lifetime: owns both ends until they are closed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ferry::supervisor {

inline constexpr size_t kMaxLineBytes = 4096;
inline constexpr int64_t kMaxLinesPerSecond = 200;

// The line splitting, cleaning and rate limit, without the pipe (for the tests).
class LineRelay {
 public:
  explicit LineRelay(std::string prefix) : prefix_(std::move(prefix)) {}
  // The lines to write for `chunk` read at `now_ns` (CLOCK_MONOTONIC), each ending in '\n'.
  std::vector<std::string> Feed(std::string_view chunk, int64_t now_ns);
  // At end of input: the unterminated last line, if any, and the drop count left to report.
  std::vector<std::string> Finish(int64_t now_ns);

 private:
  void Emit(std::string_view line, int64_t now_ns, std::vector<std::string>* out);
  void ReportDropped(std::vector<std::string>* out);

  std::string prefix_;
  std::string partial_;
  bool cutting_ = false;  // The current line passed kMaxLineBytes: the rest is skipped.
  int64_t second_ = -1;   // The second (now_ns / 1e9) lines are being counted in.
  int64_t lines_ = 0;     // Lines written in it.
  int64_t dropped_ = 0;   // Lines dropped in it.
};

class LogRelay {
 public:
  // A non-blocking pipe (both ends close-on-exec; the child gets the write end as its stdout
  // and stderr through ChildSpec::output_fd). INTERNAL when pipe2 fails.
  static Result<LogRelay> Open(std::string prefix);
  LogRelay(LogRelay&& other) noexcept;
  LogRelay& operator=(LogRelay&&) = delete;
  LogRelay(const LogRelay&) = delete;
  LogRelay& operator=(const LogRelay&) = delete;
  ~LogRelay();

  int read_fd() const { return read_fd_; }
  int write_fd() const { return write_fd_; }
  // After the child is started: ferryd keeps only the read end, so the pipe ends with it.
  void CloseWriteEnd();
  // Reads what is in the pipe and writes its lines to `out`. False once the pipe has ended
  // (every writer gone), after writing what was left.
  bool Pump(int out, int64_t now_ns);

 private:
  LogRelay(int read_fd, int write_fd, std::string prefix)
      : read_fd_(read_fd), write_fd_(write_fd), lines_(std::move(prefix)) {}
  int read_fd_ = -1;
  int write_fd_ = -1;
  LineRelay lines_;
};

}  // namespace ferry::supervisor
