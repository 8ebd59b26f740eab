// Triton's logging extension on a hook host (docs/frontend.md, "Logging"): GET /v2/logging
// (gRPC LogSettings with no settings) answers the node's log settings as this hook host holds
// them (another host's change shows within a tick); POST (LogSettings with
// some) changes them. A change applies in this process at once and is asked of ferryd through
// this hook host's object (FrontEndCountersData::log_request); ferryd applies it to itself
// and every worker and hook host within a tick, and keeps it in the segment for processes
// that start later (Segment::log_settings).
//
// Hostile input: only Triton's keys, each of its type, are taken (log_file only empty: ferry's
// processes log to ferryd, which writes to the journal); anything else is INVALID_ARGUMENT
// naming the key, and nothing changes.
//
// Thread safety: any thread. Lifetime: the segment outlives it.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/log_settings.h"
#include "common/result.h"
#include "shm/segment.h"
#include "shm/status.h"

namespace ferry::frontend {

// Triton's JSON object of the settings: log_file, log_info, log_warning, log_error,
// log_verbose_level, log_format.
nlohmann::json LogSettingsJson(const LogSettings& s);
// `base` with the keys `changes` names applied. INVALID_ARGUMENT naming the first key that is
// unknown or of the wrong type or value.
Result<LogSettings> MergeLogSettings(const LogSettings& base, const nlohmann::json& changes);

class LogEndpoint {
 public:
  // REQUIRES: `segment` attached as a hook host's slot.
  explicit LogEndpoint(const shm::Segment& segment);
  // The settings this hook host logs with: the node's (taken at start and from ferryd with
  // each change, within a tick of it), or the one it took itself a moment ago.
  LogSettings Current() const;
  // Merges `changes` into Current(), applies the result here and asks ferryd for it.
  Result<LogSettings> Update(const nlohmann::json& changes);

 private:
  shm::FrontEndCountersData& own_;
  std::mutex mu_;
  uint32_t sequence_;  // Of the last request; continues a predecessor's.
};

}  // namespace ferry::frontend
