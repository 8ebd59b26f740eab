#include "supervisor/log_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry::supervisor {

std::vector<std::string> LineRelay::Feed(std::string_view chunk, int64_t now_ns) {
  std::vector<std::string> out;
  while (!chunk.empty()) {
    size_t newline = chunk.find('\n');
    std::string_view piece = chunk.substr(0, newline);
    if (!cutting_) {
      size_t room = kMaxLineBytes - partial_.size();
      partial_.append(piece.substr(0, room));
      if (piece.size() > room) {
        Emit(partial_ + " [cut]", now_ns, &out);
        partial_.clear();
        cutting_ = true;
      }
    }
    if (newline == std::string_view::npos) {
      break;
    }
    if (!cutting_) {
      Emit(partial_, now_ns, &out);
    }
    partial_.clear();
    cutting_ = false;
    chunk.remove_prefix(newline + 1);
  }
  return out;
}

std::vector<std::string> LineRelay::Finish(int64_t now_ns) {
  std::vector<std::string> out;
  if (!partial_.empty()) {
    Emit(partial_, now_ns, &out);
    partial_.clear();
  }
  ReportDropped(&out);
  return out;
}

void LineRelay::Emit(std::string_view line, int64_t now_ns, std::vector<std::string>* out) {
  int64_t second = now_ns / 1'000'000'000;
  if (second != second_) {
    ReportDropped(out);
    second_ = second;
    lines_ = 0;
  }
  if (lines_ >= kMaxLinesPerSecond) {
    ++dropped_;
    return;
  }
  ++lines_;
  std::string text = prefix_;
  text.reserve(prefix_.size() + line.size() + 1);
  for (char c : line) {
    text.push_back((c >= 0x20 && c <= 0x7e) || c == '\t' ? c : '?');
  }
  text.push_back('\n');
  out->push_back(std::move(text));
}

void LineRelay::ReportDropped(std::vector<std::string>* out) {
  if (dropped_ > 0) {
    out->push_back(prefix_ + "(ferryd: " + std::to_string(dropped_) + " line(s) dropped, over " +
                   std::to_string(kMaxLinesPerSecond) + " a second)\n");
    dropped_ = 0;
  }
}

Result<LogRelay> LogRelay::Open(std::string prefix) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Internal(std::string("pipe2: ") + std::strerror(errno));
  }
  return LogRelay(fds[0], fds[1], std::move(prefix));
}

LogRelay::LogRelay(LogRelay&& other) noexcept
    : read_fd_(other.read_fd_), write_fd_(other.write_fd_), lines_(std::move(other.lines_)) {
  other.read_fd_ = -1;
  other.write_fd_ = -1;
}

LogRelay::~LogRelay() {
  CloseWriteEnd();
  if (read_fd_ >= 0) {
    close(read_fd_);
  }
}

void LogRelay::CloseWriteEnd() {
  if (write_fd_ >= 0) {
    close(write_fd_);
    write_fd_ = -1;
  }
}

bool LogRelay::Pump(int out, int64_t now_ns) {
  char buffer[16384];
  // A bounded amount per call, so a child writing without pause cannot hold ferryd's loop.
  for (int round = 0; round < 16; ++round) {
    ssize_t n = read(read_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    bool ended = n == 0 || (n < 0 && errno != EAGAIN);
    std::vector<std::string> lines =
        n > 0 ? lines_.Feed({buffer, static_cast<size_t>(n)}, now_ns)
              : (ended ? lines_.Finish(now_ns) : std::vector<std::string>{});
    for (const std::string& line : lines) {
      (void)!write(out, line.data(), line.size());
    }
    if (ended) {
      return false;
    }
    if (n < 0) {
      return true;  // Nothing more for now.
    }
  }
  return true;
}

}  // namespace ferry::supervisor
