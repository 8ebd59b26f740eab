#include "common/result.h"

#include <doctest/doctest.h>

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
}  // namespace ferry
