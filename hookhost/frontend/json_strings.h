// A BYTES tensor's "data" in KServe v2 JSON: strings, in nested arrays, serialized the way
// KServe's binary form and ferry's plugins hold BYTES (model/dtype.h, CheckBytesTensor).
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <vector>

#include "common/result.h"

namespace ferry::frontend {

// Appends each string of `data` (a string, or arrays nested at most kMaxJsonDepth deep from
// `depth`) to `out` as a 4-byte little-endian length and its bytes; `*read` counts them.
// INVALID_ARGUMENT for an element that is not a string, more than `count` of them, or nesting
// too deep.
Status AppendJsonStrings(simdjson::ondemand::value& data, int depth, uint64_t count,
                         std::vector<uint8_t>* out, uint64_t* read);

}  // namespace ferry::frontend
