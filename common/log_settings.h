// The log settings Triton's logging extension names (log_info, log_warning, log_error,
// log_verbose_level, log_format), as ferry's processes apply them to spdlog, and their
// encoding in one 32-bit word for shared memory and control messages. What a client sets on
// one hook host reaches every process of the node (docs/frontend.md, "Logging").
//
//   spdlog level: log_verbose_level >= 2 trace, 1 debug; else info when log_info, warn when
//   log_warning, error when log_error, off when none. log_format "ISO8601" writes text logs'
//   timestamps in ISO 8601 with the UTC offset ("default": ferry's own); JSON logs always
//   carry ISO 8601.
//
// Thread safety: Apply may be called from any thread (spdlog's logger is thread-safe).
#pragma once

#include <cstdint>

namespace ferry {

struct LogSettings {
  bool info = true;
  bool warning = true;
  bool error = true;
  uint32_t verbose_level = 0;  // At most kMaxVerboseLevel.
  bool iso8601 = false;
  bool operator==(const LogSettings&) const = default;

  static constexpr uint32_t kMaxVerboseLevel = 255;
  // Bit 30 marks a word that holds settings (0 holds none); flags in bits 0-3, the verbose
  // level in bits 8-15.
  int32_t Encode() const;
  // False for a word that holds no settings (0, anything without bit 30 or with a bit set
  // that no setting uses).
  static bool Decode(int32_t word, LogSettings* out);
};

// Applies `s` to this process's default logger (level, and the text format's timestamps).
void ApplyLogSettings(const LogSettings& s);
// What this process logs now, as settings (its --log-level as the extension would say it).
LogSettings CurrentLogSettings();

}  // namespace ferry
