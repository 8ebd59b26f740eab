#include "common/cli.h"

#include "common/logging.h"

namespace ferry {

void AddLogFlags(CLI::App& app, LogFlags* flags) {
  app.add_option("--log-format", flags->format,
                 "text for a terminal, json for one JSON object per line")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--log-level", flags->level, "trace, debug, info, warn, error, critical or off");
}

Status ApplyLogFlags(std::string_view process, const LogFlags& flags) {
  FERRY_ASSIGN_OR_RETURN(LogFormat format, ParseLogFormat(flags.format));
  return InitLogging(process, format, flags.level);
}

}  // namespace ferry
