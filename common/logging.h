// The one place ferry's processes set up logging (spdlog).
//
// Text for a person on a terminal; JSON lines (one object per line: ts, level, logger, pid,
// msg) for a log collector, chosen with --log-format json.
//
// Thread safety: InitLogging must run once, before other threads log. Logging itself is
// safe for concurrent use.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace ferry {

enum class LogFormat { kText, kJson };

// Parses "text" or "json".
Result<LogFormat> ParseLogFormat(std::string_view text);

// Installs the default logger named `process` (e.g. "ferryd") writing to stderr.
// `level` is an spdlog level name: trace, debug, info, warn, error, critical, off.
Status InitLogging(std::string_view process, LogFormat format, std::string_view level);

// The format InitLogging installed (kText before it ran).
LogFormat CurrentLogFormat();
// The text format's pattern.
inline constexpr const char* kTextLogPattern = "%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %n[%P] %v";

// Escapes `text` for inclusion inside a JSON string literal.
std::string JsonEscape(std::string_view text);

}  // namespace ferry
