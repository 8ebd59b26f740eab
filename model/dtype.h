// Element types, as named by safetensors ("F32") and by KServe v2 / manifests ("FP32").
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ferry {

enum class DType {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kU64,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
  // KServe's strings: each element a 4-byte little-endian length, then that many bytes
  // (CheckBytesTensor). Only what a client sends to a plugin: never a program's input or output.
  kBytes,
  // Safetensors-only types: ferry reads past them but does not compute with them.
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kF6E2M3,
  kF6E3M2,
  kF4,
  kC64,
};

// BOOL, UINT8 ... INT64.
bool IsInteger(DType dtype);

// Bits per element (4 and 6 for the packed float types).
int DTypeBits(DType dtype);

// Bytes of a dense tensor of `dtype` and `shape`; nullopt when a dimension is negative, the
// size overflows 64 bits or is not a whole number of bytes, and for BYTES (whose size is its
// data's).
std::optional<uint64_t> TensorByteSize(DType dtype, std::span<const int64_t> shape);

// The number of elements of `shape`; nullopt when a dimension is negative or it overflows.
std::optional<uint64_t> ElementCount(std::span<const int64_t> shape);

// Whether `bytes` is exactly `count` BYTES elements: each a 4-byte little-endian length and
// that many bytes, nothing after the last. INVALID_ARGUMENT saying where it is not.
Status CheckBytesTensor(std::span<const uint8_t> bytes, uint64_t count);

// Appends `element` to a BYTES serialization: its length (4 bytes, little-endian), then it.
// INVALID_ARGUMENT for an element of 4 GiB or more, which no length can state.
Status AppendBytesElement(std::string_view element, std::vector<uint8_t>* out);

// "F32", "BF16", ... <-> DType.
std::optional<DType> DTypeFromSafetensors(std::string_view name);
std::string_view SafetensorsName(DType dtype);

// KServe v2 names: "FP32", "INT64", "BOOL", ..., "BYTES".
std::optional<DType> DTypeFromKServe(std::string_view name);
std::string_view KServeName(DType dtype);  // "" for safetensors-only types.

}  // namespace ferry
