// Converting weight bytes between the float formats bundles may store (F32, F16, BF16), and
// a program input of any numeric KServe type to the FP32 programs compute in.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "model/dtype.h"

namespace ferry {

float Bf16ToFloat(uint16_t bits);
float F16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);  // Round to nearest even; NaN stays NaN.

// Little-endian bytes of `dtype` to fp32. INVALID_ARGUMENT for other dtypes or a byte count
// that is not a whole number of elements.
Result<std::vector<float>> ToFloat32(DType dtype, std::span<const uint8_t> bytes);

// Little-endian elements of `dtype` (BOOL, integers, F16, BF16, F32, F64) converted to fp32
// into `out`, rounding to nearest: integers of magnitude up to 2^24 are exact. INVALID_ARGUMENT
// for another dtype or when the sizes disagree (bytes must be out.size() elements).
Status ConvertToFloat32(DType dtype, std::span<const uint8_t> bytes, std::span<float> out);

}  // namespace ferry
