#include "model/dtype_convert.h"

#include <cmath>
#include <cstring>

namespace ferry {

float Bf16ToFloat(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &word, 4);
  return out;
}

float F16ToFloat(uint16_t bits) {
  uint32_t sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  return sign ? -value : value;
}

uint16_t FloatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, 4);
  if (std::isnan(value)) {
    return static_cast<uint16_t>((word >> 16) | 0x40);
  }
  uint32_t rounding = 0x7fff + ((word >> 16) & 1);
  return static_cast<uint16_t>((word + rounding) >> 16);
}

Result<std::vector<float>> ToFloat32(DType dtype, std::span<const uint8_t> bytes) {
  size_t width = dtype == DType::kF32 ? 4 : (dtype == DType::kF16 || dtype == DType::kBF16) ? 2 : 0;
  if (width == 0) {
    return InvalidArgument("cannot convert " + std::string(SafetensorsName(dtype)) +
                           " to F32: only F32, F16 and BF16 weights are supported");
  }
  if (bytes.size() % width != 0) {
    return InvalidArgument("weight bytes are not a whole number of elements");
  }
  std::vector<float> out(bytes.size() / width);
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    out[i] = dtype == DType::kBF16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
  }
  return out;
}

}  // namespace ferry
