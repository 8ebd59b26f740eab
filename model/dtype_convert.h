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
// Round to nearest even; beyond FP16's range infinity; NaN stays NaN.
uint16_t FloatToF16(float value);

// Little-endian bytes of `dtype` to fp32. INVALID_ARGUMENT for other dtypes or a byte count
// that is not a whole number of elements.
Result<std::vector<float>> ToFloat32(DType dtype, std::span<const uint8_t> bytes);

// Little-endian elements of `dtype` (BOOL, integers, F16, BF16, F32, F64) converted to fp32
// into `out`, rounding to nearest: integers of magnitude up to 2^24 are exact. INVALID_ARGUMENT
// for another dtype or when the sizes disagree (bytes must be out.size() elements).
Status ConvertToFloat32(DType dtype, std::span<const uint8_t> bytes, std::span<float> out);

// fp32 `values` to little-endian elements of `dtype` in `out` (a program output declared in
// another type). Integers: rounded to nearest, saturated to the type's range, NaN as 0. BOOL:
// 1 for any value but 0. F16 and BF16: rounded to nearest even. INVALID_ARGUMENT for another
// dtype or when the sizes disagree (out must hold values.size() elements).
Status ConvertFromFloat32(DType dtype, std::span<const float> values, std::span<uint8_t> out);

}  // namespace ferry
