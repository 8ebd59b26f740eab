// LogSettings: the word round-trips every setting, a word with stray bits or without the
// marker holds none, and applying settings sets the logger's level.
#include "common/log_settings.h"

#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

namespace ferry {
namespace {

TEST_CASE("log settings round-trip through their word; malformed words hold none") {
  LogSettings s;
  s.info = false;
  s.verbose_level = 7;
  s.iso8601 = true;
  LogSettings back;
  REQUIRE(LogSettings::Decode(s.Encode(), &back));
  CHECK(back == s);
  s.verbose_level = 100000;  // Clamped to the word's field.
  REQUIRE(LogSettings::Decode(s.Encode(), &back));
  CHECK(back.verbose_level == LogSettings::kMaxVerboseLevel);
  CHECK_FALSE(LogSettings::Decode(0, &back));
  CHECK_FALSE(LogSettings::Decode(0x0f, &back));                   // No marker.
  CHECK_FALSE(LogSettings::Decode((1 << 30) | (1 << 20), &back));  // A stray bit.
  CHECK_FALSE(LogSettings::Decode(-1, &back));
}

TEST_CASE("applied settings set the level, and are what the process reports") {
  LogSettings s;
  s.verbose_level = 1;
  ApplyLogSettings(s);
  CHECK(spdlog::default_logger()->level() == spdlog::level::debug);
  CHECK(CurrentLogSettings() == s);
  s = LogSettings{};
  s.info = false;
  ApplyLogSettings(s);
  CHECK(spdlog::default_logger()->level() == spdlog::level::warn);
  s.warning = false;
  s.error = false;
  ApplyLogSettings(s);
  CHECK(spdlog::default_logger()->level() == spdlog::level::off);
  ApplyLogSettings(LogSettings{});
  CHECK(spdlog::default_logger()->level() == spdlog::level::info);
}

}  // namespace
}  // namespace ferry
