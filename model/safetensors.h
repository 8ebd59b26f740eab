// Reader for the safetensors weight format, following huggingface/safetensors exactly:
//   8 bytes   N, little-endian u64: header length
//   N bytes   UTF-8 JSON object starting with '{' (may be padded with trailing spaces):
//             {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
//              "__metadata__": {"key": "value", ...}}
//   rest      the byte buffer; offsets are relative to its start.
// Rules enforced (the file is hostile until proven otherwise): N <= 100,000,000; 8 + N within
// the file; no duplicate keys; known dtypes; shape x dtype bits == END - BEGIN without
// overflow; sorted by offset the tensors start at 0 and each begins where the previous ended
// (no holes, no overlap); the buffer ends exactly at the last END. Nothing is read outside the
// mapping.
//
// Thread safety: immutable after parsing; safe for concurrent use.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/dtype.h"
#include "model/mapped_file.h"

namespace ferry {

// Limits checked while the header is parsed, before any work proportional to them.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
inline constexpr size_t kSafetensorsMaxTensors = 100'000;
inline constexpr size_t kSafetensorsMaxJsonDepth = 4;     // header > tensor > shape (> 1 spare).
inline constexpr size_t kSafetensorsMaxArray = 16;        // Elements of a shape or offsets.
inline constexpr size_t kSafetensorsMaxEntries = 10'000;  // Keys of a nested object (metadata).

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Offset in the byte buffer.
  uint64_t end = 0;    // One past the last byte.

  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsIndex {
  std::vector<TensorInfo> tensors;  // In file order (ascending offsets).
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;                             // File offset of the byte buffer: 8 + N.
  std::map<std::string, size_t, std::less<>> by_name;  // Index into tensors.

  // O(log n). REQUIRES: the index came from ParseSafetensors (by_name filled).
  const TensorInfo* Find(std::string_view name) const;
};

// Parses and checks a whole safetensors file held in `file`. `source` names it in errors.
Result<SafetensorsIndex> ParseSafetensors(std::span<const uint8_t> file, std::string_view source);

// An FP32 tensor to write (a bundle's weight).
struct Float32Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // Row-major; as many as the shape holds.
};

// The bytes of a safetensors file holding `tensors` as F32, in order, each right after the
// previous (what ParseSafetensors accepts). REQUIRES: distinct names.
std::string EncodeSafetensors(const std::vector<Float32Tensor>& tensors);

// A mapped, validated safetensors file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path);
  // No tensors (a pipeline bundle has no weights).
  static SafetensorsFile Empty() { return SafetensorsFile(MappedFile::Empty(), {}); }

  const SafetensorsIndex& index() const { return index_; }
  // The tensor's bytes inside the mapping. REQUIRES: `tensor` is from index().
  std::span<const uint8_t> Data(const TensorInfo& tensor) const;
  const std::string& path() const { return file_.path(); }

 private:
  SafetensorsFile(MappedFile file, SafetensorsIndex index)
      : file_(std::move(file)), index_(std::move(index)) {}

  MappedFile file_;
  SafetensorsIndex index_;
};

}  // namespace ferry
