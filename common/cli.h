// Flags every ferry executable shares (--log-format, --log-level), set up in one place.
//
// Thread safety: call from main before starting threads.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/result.h"

namespace ferry {

struct LogFlags {
  std::string format = "text";
  std::string level = "info";
};

// Adds --log-format and --log-level to `app`.
void AddLogFlags(CLI::App& app, LogFlags* flags);

// Initialises logging for `process` from the parsed flags.
Status ApplyLogFlags(std::string_view process, const LogFlags& flags);

}  // namespace ferry
