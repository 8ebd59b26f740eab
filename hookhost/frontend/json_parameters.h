// The "parameters" object of a KServe v2 JSON infer request, of one of its inputs or of a
// requested output, as the simdjson On-Demand parser reads it (infer_request_json.cc): the
// keys ferry knows, each typed; others skipped unread.
//
// Thread safety: pure functions.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ferry::frontend {

// The keys ferry reads, each nullopt when absent.
struct JsonParameters {
  std::optional<bool> binary_data_output, binary_data;
  std::optional<int64_t> timeout, priority, binary_data_size;
  std::optional<int64_t> shared_memory_offset, shared_memory_byte_size;
  std::optional<std::string> tenant, shared_memory_region;
  // Triton's sequence_id (an unsigned integer; 0 or "" is none) and its flags.
  uint64_t sequence_id = 0;
  bool sequence_start = false, sequence_end = false;
};

// `value`'s keys into `out`; INVALID_ARGUMENT when it is not an object or a known key has the
// wrong type. Strings are clipped (Clip) to kMaxTenantNameBytes.
Status ReadParameters(simdjson::ondemand::value& value, JsonParameters* out);

// The first `max` bytes of `s`, cut back to a UTF-8 character boundary.
std::string Clip(std::string_view s, size_t max);

}  // namespace ferry::frontend
