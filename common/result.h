// ferry's one error type: a canonical code plus a message that names what was wrong.
//
// Result<T> holds either a value or an Error (std::expected-style). Status is Result<void>.
// The codes are the canonical set the front end maps to HTTP and gRPC (DESIGN.md, Errors).
// No exceptions cross a component boundary: third-party throwers are caught at the adapter
// and turned into an Error here.
//
// Thread safety: values of these types are plain data; requires external synchronization.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ferry {

enum class ErrorCode {
  kInvalidArgument,    // 400: the caller sent something wrong.
  kNotFound,           // 404: no such model, tensor or file.
  kResourceExhausted,  // 429/503 + Retry-After: queue or arena full.
  kDeadlineExceeded,   // 504: the request's deadline passed.
  kUnavailable,        // 503: a worker or hook host was lost.
  kInternal,           // 500: a bug or an impossible environment.
  kCancelled,          // 499: the client left (closed its connection, cancelled its call).
  kUnauthenticated,    // 401: no valid API key where one is required.
  kPermissionDenied,   // 403: the key's tenant may not call this model.
};
inline constexpr ErrorCode kLastErrorCode = ErrorCode::kPermissionDenied;

// "INVALID_ARGUMENT", "NOT_FOUND", ...
std::string_view ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;

  // "INVALID_ARGUMENT: <message>"
  std::string ToString() const;
};

// A refusal that knows when a retry could succeed says so at the end of its message, as
// "retry after N ms"; the front ends turn it into Retry-After (HTTP, whole seconds rounded
// up). RetryAfterMs finds the last such hint, or nullopt (also for a hostile or absurd
// number: at most a day is read).
std::string RetryHint(int64_t milliseconds);
std::optional<int64_t> RetryAfterMs(std::string_view message);

inline Error InvalidArgument(std::string message) {
  return {ErrorCode::kInvalidArgument, std::move(message)};
}
inline Error NotFound(std::string message) { return {ErrorCode::kNotFound, std::move(message)}; }
inline Error ResourceExhausted(std::string message) {
  return {ErrorCode::kResourceExhausted, std::move(message)};
}
inline Error DeadlineExceeded(std::string message) {
  return {ErrorCode::kDeadlineExceeded, std::move(message)};
}
inline Error Unavailable(std::string message) {
  return {ErrorCode::kUnavailable, std::move(message)};
}
inline Error Internal(std::string message) { return {ErrorCode::kInternal, std::move(message)}; }
inline Error Cancelled(std::string message) { return {ErrorCode::kCancelled, std::move(message)}; }
inline Error Unauthenticated(std::string message) {
  return {ErrorCode::kUnauthenticated, std::move(message)};
}
inline Error PermissionDenied(std::string message) {
  return {ErrorCode::kPermissionDenied, std::move(message)};
}

// Reports a Result used against its REQUIRES (value() of an error, error() of a success) and
// aborts, in every build: a test checking `error().code` of a Result that is wrongly OK must
// fail, not read an empty error.
[[noreturn]] void ResultMisuse(const char* what);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return state_.index() == 0; }

  // REQUIRES: ok() (aborts otherwise).
  const T& value() const& { return std::get<0>(Checked(0)); }
  T& value() & { return std::get<0>(Checked(0)); }
  T&& value() && { return std::get<0>(std::move(Checked(0))); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // REQUIRES: !ok() (aborts otherwise).
  const Error& error() const& { return std::get<1>(Checked(1)); }
  Error&& error() && { return std::get<1>(std::move(Checked(1))); }

 private:
  const std::variant<T, Error>& Checked(size_t index) const {
    if (state_.index() != index) {
      ResultMisuse(index == 0 ? "value() of an error Result" : "error() of an OK Result");
    }
    return state_;
  }
  std::variant<T, Error>& Checked(size_t index) {
    if (state_.index() != index) {
      ResultMisuse(index == 0 ? "value() of an error Result" : "error() of an OK Result");
    }
    return state_;
  }

  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return !error_.has_value(); }
  // REQUIRES: !ok() (aborts otherwise).
  const Error& error() const& {
    if (!error_) {
      ResultMisuse("error() of an OK Status");
    }
    return *error_;
  }
  Error&& error() && {
    if (!error_) {
      ResultMisuse("error() of an OK Status");
    }
    return std::move(*error_);
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

inline Status OkStatus() { return {}; }

}  // namespace ferry

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)

// Returns the error of `expr` (a Result or Status) from the enclosing function.
#define FERRY_RETURN_IF_ERROR(expr)            \
  do {                                         \
    auto ferry_status_ = (expr);               \
    if (!ferry_status_.ok()) {                 \
      return std::move(ferry_status_).error(); \
    }                                          \
  } while (false)

// `lhs = value of expr`, or returns its error from the enclosing function.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(ferry_result_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) {                                   \
    return std::move(tmp).error();                   \
  }                                                  \
  lhs = std::move(tmp).value()
