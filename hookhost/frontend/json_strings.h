// A BYTES tensor's "data" in KServe v2 JSON: strings, in nested arrays, serialized the way
// KServe's binary form and ferry's plugins hold BYTES (model/dtype.h, CheckBytesTensor).
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ferry::frontend {

// Appends each string of `data` (a string, or arrays nested at most kMaxJsonDepth deep from
// `depth`) to `out` as a 4-byte little-endian length and its bytes; `*read` counts them.
// INVALID_ARGUMENT for an element that is not a string, more than `count` of them, or nesting
// too deep.
Status AppendJsonStrings(simdjson::ondemand::value& data, int depth, uint64_t count,
                         std::vector<uint8_t>* out, uint64_t* read);

// Input `name`'s strings from its "data" into `out` (AppendJsonStrings from depth 0): exactly
// `count` of them, and no more than a body of `text_bytes` can hold (each takes at least
// three characters), checked before anything is read.
Status ReadJsonStrings(simdjson::ondemand::value& data, const std::string& name, uint64_t count,
                       size_t text_bytes, std::vector<uint8_t>* out);

}  // namespace ferry::frontend
