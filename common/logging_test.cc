#include "common/logging.h"

#include <doctest/doctest.h>

namespace ferry {
namespace {

TEST_CASE("JSON log messages escape quotes, backslashes and control characters") {
  CHECK(JsonEscape("plain") == "plain");
  CHECK(JsonEscape("say \"hi\"\\") == "say \\\"hi\\\"\\\\");
  CHECK(JsonEscape("a\nb\tc\x01") == "a\\nb\\tc\\u0001");
}

TEST_CASE("log format and level names are validated") {
  CHECK(ParseLogFormat("json").value() == LogFormat::kJson);
  CHECK(ParseLogFormat("text").value() == LogFormat::kText);
  CHECK_FALSE(ParseLogFormat("xml").ok());
  CHECK_FALSE(InitLogging("test-bad", LogFormat::kText, "loud").ok());
  CHECK(InitLogging("test-good", LogFormat::kJson, "warn").ok());
}

}  // namespace
}  // namespace ferry
