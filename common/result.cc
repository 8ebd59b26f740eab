#include "common/result.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ferry {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case ErrorCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
    case ErrorCode::kInternal:
      return "INTERNAL";
    case ErrorCode::kCancelled:
      return "CANCELLED";
    case ErrorCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case ErrorCode::kPermissionDenied:
      return "PERMISSION_DENIED";
  }
  return "UNKNOWN";
}

void ResultMisuse(const char* what) {
  std::fprintf(stderr, "ferry: Result misuse: %s\n", what);
  std::abort();
}

std::string Error::ToString() const {
  std::string out(ErrorCodeName(code));
  out += ": ";
  out += message;
  return out;
}

std::string RetryHint(int64_t milliseconds) {
  return "retry after " + std::to_string(std::max<int64_t>(milliseconds, 1)) + " ms";
}

std::optional<int64_t> RetryAfterMs(std::string_view message) {
  constexpr std::string_view kLead = "retry after ";
  size_t at = message.rfind(kLead);
  if (at == std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view rest = message.substr(at + kLead.size());
  int64_t ms = 0;
  size_t digits = 0;
  while (digits < rest.size() && digits < 9 && rest[digits] >= '0' && rest[digits] <= '9') {
    ms = ms * 10 + (rest[digits] - '0');
    ++digits;
  }
  if (digits == 0 || rest.substr(digits, 3) != " ms" || ms > 86'400'000) {
    return std::nullopt;
  }
  return ms;
}

}  // namespace ferry
