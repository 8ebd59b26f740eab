// NumPy .npy files (format versions 1.0, 2.0 and 3.0), for `ferryctl infer`: read an input
// tensor, write an output. Only what ferry computes with: little-endian or byte-order-free
// bool, integer and float types, C order.
//
// Hostile by default: the file must be a regular file of at most kMaxNpyBytes; the magic,
// version, header length, every header key and the data length are checked; a shape whose
// byte size overflows or disagrees with the data is refused.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "client/kserve_client.h"
#include "common/result.h"

namespace ferry::ctl {

inline constexpr size_t kMaxNpyBytes = size_t{4} << 30;

// INVALID_ARGUMENT naming what is wrong (not .npy, a dtype or order ferry does not take, a
// size mismatch); the tensor is named `name`.
Result<client::Tensor> ParseNpy(std::string_view bytes, const std::string& name);
Result<client::Tensor> ReadNpy(const std::string& path, const std::string& name);
// A version 1.0 file (C order).
std::string EncodeNpy(const client::Tensor& tensor);

}  // namespace ferry::ctl
