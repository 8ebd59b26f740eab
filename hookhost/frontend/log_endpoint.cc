#include "hookhost/frontend/log_endpoint.h"

namespace ferry::frontend {

nlohmann::json LogSettingsJson(const LogSettings& s) {
  return {{"log_file", ""},
          {"log_info", s.info},
          {"log_warning", s.warning},
          {"log_error", s.error},
          {"log_verbose_level", s.verbose_level},
          {"log_format", s.iso8601 ? "ISO8601" : "default"}};
}

Result<LogSettings> MergeLogSettings(const LogSettings& base, const nlohmann::json& changes) {
  if (!changes.is_object()) {
    return InvalidArgument("log settings: expected a JSON object of settings");
  }
  LogSettings s = base;
  for (const auto& [key, value] : changes.items()) {
    std::string named = "log settings: '" + key.substr(0, 64) + "' ";
    if (key == "log_info" || key == "log_warning" || key == "log_error") {
      if (!value.is_boolean()) {
        return InvalidArgument(named + "must be true or false");
      }
      (key == "log_info" ? s.info : key == "log_warning" ? s.warning : s.error) = value.get<bool>();
    } else if (key == "log_verbose_level") {
      // An integer either way JSON holds it (a huge unsigned one reads negative here).
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() > int64_t{LogSettings::kMaxVerboseLevel}) {
        return InvalidArgument(named + "must be an integer from 0 to " +
                               std::to_string(LogSettings::kMaxVerboseLevel));
      }
      s.verbose_level = value.get<uint32_t>();
    } else if (key == "log_format") {
      if (!value.is_string() || (value != "default" && value != "ISO8601")) {
        return InvalidArgument(named + "must be \"default\" or \"ISO8601\"");
      }
      s.iso8601 = value == "ISO8601";
    } else if (key == "log_file") {
      if (!value.is_string() || !value.get<std::string>().empty()) {
        return InvalidArgument(named +
                               "must be empty: ferry's processes log to ferryd, which writes "
                               "to its standard error (the journal under systemd)");
      }
    } else {
      return InvalidArgument(named +
                             "is not a log setting (log_file, log_info, log_warning, "
                             "log_error, log_verbose_level, log_format)");
    }
  }
  return s;
}

LogEndpoint::LogEndpoint(const shm::Segment& segment)
    : own_(segment.frontend_counters(segment.owner())),
      sequence_(static_cast<uint32_t>(own_.log_request.load(std::memory_order_relaxed) >> 32)) {}

LogSettings LogEndpoint::Current() const {
  // This process's: it took the node's at start and takes every change ferryd sends, and its
  // own changes at once (so a client reads back what it just set).
  return CurrentLogSettings();
}

Result<LogSettings> LogEndpoint::Update(const nlohmann::json& changes) {
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_ASSIGN_OR_RETURN(LogSettings next, MergeLogSettings(Current(), changes));
  ApplyLogSettings(next);
  ++sequence_;
  own_.log_request.store(uint64_t{sequence_} << 32 | static_cast<uint32_t>(next.Encode()),
                         std::memory_order_release);
  return next;
}

}  // namespace ferry::frontend
