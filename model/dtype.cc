#include "model/dtype.h"

#include <array>
#include <string>

namespace ferry {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view safetensors;
  std::string_view kserve;
  int bits;
};

constexpr std::array<DTypeInfo, 23> kDTypes = {{
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
    {DType::kBytes, "", "BYTES", 0},  // No safetensors name: never a weight.
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
    if (!info.safetensors.empty() && info.safetensors == name) {
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
  if (dtype == DType::kBytes) {
    return std::nullopt;
  }
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

std::optional<uint64_t> ElementCount(std::span<const int64_t> shape) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count)) {
      return std::nullopt;
    }
  }
  return count;
}

Status CheckBytesTensor(std::span<const uint8_t> bytes, uint64_t count) {
  size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes.size() - at < 4) {
      return InvalidArgument("BYTES element " + std::to_string(i) + " of " + std::to_string(count) +
                             ": the data ends before its length");
    }
    uint32_t length = static_cast<uint32_t>(bytes[at]) | static_cast<uint32_t>(bytes[at + 1]) << 8 |
                      static_cast<uint32_t>(bytes[at + 2]) << 16 |
                      static_cast<uint32_t>(bytes[at + 3]) << 24;
    at += 4;
    if (bytes.size() - at < length) {
      return InvalidArgument("BYTES element " + std::to_string(i) + " claims " +
                             std::to_string(length) + " bytes; " +
                             std::to_string(bytes.size() - at) + " are left");
    }
    at += length;
  }
  if (at != bytes.size()) {
    return InvalidArgument("BYTES data holds " + std::to_string(bytes.size() - at) +
                           " bytes after its " + std::to_string(count) + " elements");
  }
  return OkStatus();
}

Status AppendBytesElement(std::string_view element, std::vector<uint8_t>* out) {
  if (element.size() > UINT32_MAX) {
    return InvalidArgument("a BYTES element of " + std::to_string(element.size()) +
                           " bytes: at most 2^32 - 1");
  }
  auto length = static_cast<uint32_t>(element.size());
  for (int i = 0; i < 4; ++i) {
    out->push_back(static_cast<uint8_t>(length >> (8 * i)));
  }
  out->insert(out->end(), element.begin(), element.end());
  return OkStatus();
}

}  // namespace ferry
