// HTTP body compression as Triton accepts it: a request body with Content-Encoding gzip or
// deflate is inflated before it is parsed; an answer is compressed when the client's
// Accept-Encoding asks for gzip or deflate ("deflate" is the zlib format, RFC 1950, as
// Python's zlib.compress and curl produce it).
//
// Hostile by default: inflating stops at `max_bytes` of output, or at a ratio to the
// compressed size (a small body that inflates to gigabytes, a "zip bomb", is refused, never
// held, and costs no more than the ratio allows), and a truncated or corrupt stream is an
// error, not a partial body.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ferry::net {

enum class Encoding { kIdentity, kGzip, kDeflate };

// A Content-Encoding value: identity, gzip or deflate (case-insensitive); nullopt otherwise.
std::optional<Encoding> ParseContentEncoding(std::string_view value);
// The encoding to answer with for an Accept-Encoding header: gzip, else deflate, when listed
// without q=0; identity otherwise.
Encoding ChooseEncoding(std::string_view accept_encoding);
std::string_view EncodingName(Encoding encoding);

// Below this much output, any compression ratio is allowed (a small tensor of zeros
// compresses a hundredfold and costs nothing to inflate).
inline constexpr size_t kInflateRatioFloor = 1 << 20;

// INVALID_ARGUMENT for a corrupt or truncated stream; RESOURCE_EXHAUSTED when the output
// would exceed `max_bytes`, or `max_ratio` times the body's size once past
// kInflateRatioFloor (0: no ratio limit). Either stops the inflation there: the work spent
// on a bomb is bounded by what it would be allowed, not by what it claims.
Result<std::string> Inflate(std::string_view body, Encoding encoding, size_t max_bytes,
                            uint64_t max_ratio = 0);
std::string Deflate(std::string_view body, Encoding encoding);

}  // namespace ferry::net
