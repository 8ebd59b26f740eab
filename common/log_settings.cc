#include "common/log_settings.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "common/logging.h"

namespace ferry {
namespace {

constexpr int32_t kHolds = 1 << 30;

spdlog::level::level_enum LevelOf(const LogSettings& s) {
  if (s.verbose_level >= 2) {
    return spdlog::level::trace;
  }
  if (s.verbose_level == 1) {
    return spdlog::level::debug;
  }
  if (s.info) {
    return spdlog::level::info;
  }
  if (s.warning) {
    return spdlog::level::warn;
  }
  return s.error ? spdlog::level::err : spdlog::level::off;
}

// The settings in force: set by Apply, or derived from the logger's level.
std::mutex applied_mu;
LogSettings applied;
bool has_applied = false;

}  // namespace

int32_t LogSettings::Encode() const {
  return kHolds | (info ? 1 : 0) | (warning ? 2 : 0) | (error ? 4 : 0) | (iso8601 ? 8 : 0) |
         static_cast<int32_t>(std::min(verbose_level, kMaxVerboseLevel) << 8);
}

bool LogSettings::Decode(int32_t word, LogSettings* out) {
  if ((word & kHolds) == 0 || (word & ~(kHolds | 0xff0f)) != 0) {
    return false;
  }
  out->info = (word & 1) != 0;
  out->warning = (word & 2) != 0;
  out->error = (word & 4) != 0;
  out->iso8601 = (word & 8) != 0;
  out->verbose_level = static_cast<uint32_t>(word >> 8) & 0xff;
  return true;
}

void ApplyLogSettings(const LogSettings& s) {
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  logger->set_level(LevelOf(s));
  if (CurrentLogFormat() == LogFormat::kText) {
    logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        s.iso8601 ? "%Y-%m-%dT%H:%M:%S.%e%z %^%-5l%$ %n[%P] %v" : kTextLogPattern));
  }
  std::lock_guard<std::mutex> lock(applied_mu);
  applied = s;
  has_applied = true;
}

LogSettings CurrentLogSettings() {
  std::lock_guard<std::mutex> lock(applied_mu);
  if (has_applied) {
    return applied;
  }
  LogSettings s;
  spdlog::level::level_enum level = spdlog::default_logger()->level();
  s.verbose_level = level == spdlog::level::trace ? 2 : level == spdlog::level::debug ? 1 : 0;
  s.info = level <= spdlog::level::info;
  s.warning = level <= spdlog::level::warn;
  s.error = level <= spdlog::level::err;
  return s;
}

}  // namespace ferry
