#include "model/dtype_convert.h"

#include <cmath>
#include <cstring>
#include <limits>

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
  FERRY_RETURN_IF_ERROR(ConvertToFloat32(dtype, bytes, out));
  return out;
}

namespace {

template <typename T>
void Widen(std::span<const uint8_t> bytes, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = static_cast<float>(v);
  }
}

}  // namespace

Status ConvertToFloat32(DType dtype, std::span<const uint8_t> bytes, std::span<float> out) {
  int bits = DTypeBits(dtype);
  if (bits % 8 != 0 || bytes.size() != out.size() * static_cast<size_t>(bits / 8)) {
    return InvalidArgument("cannot convert " + std::to_string(bytes.size()) + " bytes of " +
                           std::string(SafetensorsName(dtype)) + " to " +
                           std::to_string(out.size()) + " FP32 values");
  }
  switch (dtype) {
    case DType::kBool:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = bytes[i] != 0 ? 1.0f : 0.0f;
      }
      return OkStatus();
    case DType::kU8:
      Widen<uint8_t>(bytes, out);
      return OkStatus();
    case DType::kI8:
      Widen<int8_t>(bytes, out);
      return OkStatus();
    case DType::kU16:
      Widen<uint16_t>(bytes, out);
      return OkStatus();
    case DType::kI16:
      Widen<int16_t>(bytes, out);
      return OkStatus();
    case DType::kU32:
      Widen<uint32_t>(bytes, out);
      return OkStatus();
    case DType::kI32:
      Widen<int32_t>(bytes, out);
      return OkStatus();
    case DType::kU64:
      Widen<uint64_t>(bytes, out);
      return OkStatus();
    case DType::kI64:
      Widen<int64_t>(bytes, out);
      return OkStatus();
    case DType::kF64:
      // Beyond FP32's range the cast would be undefined behaviour: saturate to infinity.
      for (size_t i = 0; i < out.size(); ++i) {
        double v;
        std::memcpy(&v, bytes.data() + i * 8, 8);
        out[i] = std::abs(v) > std::numeric_limits<float>::max() ? std::copysign(INFINITY, v)
                                                                 : static_cast<float>(v);
      }
      return OkStatus();
    case DType::kF32:
      std::memcpy(out.data(), bytes.data(), bytes.size());
      return OkStatus();
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t v = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
        out[i] = dtype == DType::kBF16 ? Bf16ToFloat(v) : F16ToFloat(v);
      }
      return OkStatus();
    default:
      return InvalidArgument("cannot convert " + std::string(SafetensorsName(dtype)) + " to FP32");
  }
}

uint16_t FloatToF16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t exponent = (x >> 23) & 0xff, mantissa = x & 0x7fffff;
  if (exponent == 0xff) {
    return static_cast<uint16_t>(sign | 0x7c00 | (mantissa != 0 ? 0x200 : 0));
  }
  int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) {
    return static_cast<uint16_t>(sign | 0x7c00);
  }
  uint32_t half = 0, rest = 0, shift = 13;
  if (e <= 0) {  // A subnormal half (or zero): the implicit bit shifted in.
    if (e < -10) {
      return sign;
    }
    mantissa |= 0x800000;
    shift = static_cast<uint32_t>(14 - e);
    half = mantissa >> shift;
  } else {
    half = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  }
  rest = mantissa & ((1u << shift) - 1);
  uint32_t middle = 1u << (shift - 1);
  if (rest > middle || (rest == middle && (half & 1) != 0)) {
    ++half;  // A carry into the exponent rounds up correctly, to infinity at the top.
  }
  return static_cast<uint16_t>(sign | half);
}

namespace {

// Rounded to nearest, saturated to T's range, NaN as 0.
template <typename T>
void Narrow(std::span<const float> values, std::span<uint8_t> out) {
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < values.size(); ++i) {
    double r = std::nearbyint(static_cast<double>(values[i]));
    T t = 0;
    if (std::isnan(r)) {
      t = 0;
    } else if (r >= hi) {
      t = std::numeric_limits<T>::max();
    } else if (r <= lo) {
      t = std::numeric_limits<T>::min();
    } else {
      t = static_cast<T>(r);
    }
    std::memcpy(out.data() + i * sizeof(T), &t, sizeof(T));
  }
}

}  // namespace

Status ConvertFromFloat32(DType dtype, std::span<const float> values, std::span<uint8_t> out) {
  int bits = DTypeBits(dtype);
  if (bits % 8 != 0 || bits == 0 || out.size() != values.size() * static_cast<size_t>(bits / 8)) {
    return InvalidArgument("cannot convert " + std::to_string(values.size()) + " FP32 values to " +
                           std::to_string(out.size()) + " bytes of " +
                           std::string(SafetensorsName(dtype)));
  }
  switch (dtype) {
    case DType::kBool:
      for (size_t i = 0; i < values.size(); ++i) {
        out[i] = values[i] != 0.0f ? 1 : 0;
      }
      return OkStatus();
    case DType::kU8:
      Narrow<uint8_t>(values, out);
      return OkStatus();
    case DType::kI8:
      Narrow<int8_t>(values, out);
      return OkStatus();
    case DType::kU16:
      Narrow<uint16_t>(values, out);
      return OkStatus();
    case DType::kI16:
      Narrow<int16_t>(values, out);
      return OkStatus();
    case DType::kU32:
      Narrow<uint32_t>(values, out);
      return OkStatus();
    case DType::kI32:
      Narrow<int32_t>(values, out);
      return OkStatus();
    case DType::kU64:
      Narrow<uint64_t>(values, out);
      return OkStatus();
    case DType::kI64:
      Narrow<int64_t>(values, out);
      return OkStatus();
    case DType::kF64:
      for (size_t i = 0; i < values.size(); ++i) {
        double v = values[i];
        std::memcpy(out.data() + i * 8, &v, 8);
      }
      return OkStatus();
    case DType::kF32:
      std::memcpy(out.data(), values.data(), out.size());
      return OkStatus();
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < values.size(); ++i) {
        uint16_t v = dtype == DType::kBF16 ? FloatToBf16(values[i]) : FloatToF16(values[i]);
        out[2 * i] = static_cast<uint8_t>(v & 0xff);
        out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
      }
      return OkStatus();
    default:
      return InvalidArgument("cannot convert FP32 to " + std::string(SafetensorsName(dtype)));
  }
}

}  // namespace ferry
