#include "model/dtype.h"

#include <array>

namespace ferry {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view safetensors;
  std::string_view kserve;
  int bits;
};

constexpr std::array<DTypeInfo, 22> kDTypes = {{
    {DType::kBool, "BOOL", "BOOL", 8},
    {DType::kU8, "U8", "UINT8", 8},
    {DType::kI8, "I8", "INT8", 8},
    {DType::kU16, "U16", "UINT16", 16},
    {DType::kI16, "I16", "INT16", 16},
    {DType::kU32, "U32", "UINT32", 32},
    {DType::kI32, "I32", "INT32", 32},
    {DType::kU64, "U64", "UINT64", 64},
    {DType::kI64, "I64", "INT64", 64},
    {DType::kF16, "F16", "FP16", 16},
    {DType::kBF16, "BF16", "BF16", 16},
    {DType::kF32, "F32", "FP32", 32},
    {DType::kF64, "F64", "FP64", 64},
    {DType::kF8E4M3, "F8_E4M3", "", 8},
    {DType::kF8E5M2, "F8_E5M2", "", 8},
    {DType::kF8E8M0, "F8_E8M0", "", 8},
    {DType::kF8E4M3Fnuz, "F8_E4M3FNUZ", "", 8},
    {DType::kF8E5M2Fnuz, "F8_E5M2FNUZ", "", 8},
    {DType::kF6E2M3, "F6_E2M3", "", 6},
    {DType::kF6E3M2, "F6_E3M2", "", 6},
    {DType::kF4, "F4", "", 4},
    {DType::kC64, "C64", "", 64},
}};

const DTypeInfo& Info(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) {
      return info;
    }
  }
  return kDTypes[0];  // Unreachable: every enumerator is in the table.
}

}  // namespace

bool IsInteger(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kU8:
    case DType::kI8:
    case DType::kU16:
    case DType::kI16:
    case DType::kU32:
    case DType::kI32:
    case DType::kU64:
    case DType::kI64:
      return true;
    default:
      return false;
  }
}

int DTypeBits(DType dtype) { return Info(dtype).bits; }
std::string_view SafetensorsName(DType dtype) { return Info(dtype).safetensors; }
std::string_view KServeName(DType dtype) { return Info(dtype).kserve; }

std::optional<DType> DTypeFromSafetensors(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.safetensors == name) {
      return info.dtype;
    }
  }
  return std::nullopt;
}

std::optional<DType> DTypeFromKServe(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (!info.kserve.empty() && info.kserve == name) {
      return info.dtype;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> TensorByteSize(DType dtype, std::span<const int64_t> shape) {
  uint64_t bits = static_cast<uint64_t>(DTypeBits(dtype));
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bits, static_cast<uint64_t>(d), &bits)) {
      return std::nullopt;
    }
  }
  if (bits % 8 != 0) {
    return std::nullopt;
  }
  return bits / 8;
}

}  // namespace ferry
