// Reading an ONNX file as hostile input: the protobuf parsed under size limits, the opset
// checked, every initializer (and Constant node) decoded to host values with its element count
// matched against its bytes, external data read only from regular files inside the model's
// directory. The graph itself is converted by model/onnx/onnx_import.h.
//
// Thread safety: plain data and pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"

namespace onnx {
class ModelProto;
class TensorProto;
}  // namespace onnx

namespace ferry::onnx_import {

// Limits on an ONNX file, checked before any conversion (docs/models.md, "Limits").
inline constexpr uint64_t kMaxOnnxFileBytes = (uint64_t{1} << 31) - 1;  // protobuf's own limit.
inline constexpr size_t kMaxOnnxNodes = 100000;
inline constexpr size_t kMaxOnnxInitializers = 100000;
inline constexpr uint64_t kMaxTensorElements = uint64_t{1} << 32;
inline constexpr uint64_t kMaxTotalWeightBytes = uint64_t{16} << 30;
inline constexpr size_t kMaxOnnxRank = 8;  // As manifests.
// Each op converts only at the versions whose semantics it implements (onnx_ops.cc), found
// for the model's opset in ONNX's schema registry; ONNX's version converter is not used: it
// crashes on malformed graphs.
inline constexpr int64_t kMinOpset = 1;
inline constexpr int64_t kMaxOpset = 17;

// A constant tensor (an initializer or a Constant node's value) decoded to host values:
// float types (FLOAT, FLOAT16, BFLOAT16, DOUBLE) into `floats`, integer types and BOOL into
// `ints`.
struct ConstTensor {
  std::string name;
  Shape dims;
  bool integer = false;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  // Folded at import from a batch-sized shape (model/onnx/folding.h): axis 0, of size 1 here,
  // stands for the batch axis, the same values in every row.
  bool batch_broadcast = false;
  // Folded from a tensor's shape: true where ints[i] is the batch size, known only at run
  // time (its value there is 0, never read as a number); empty when no element is.
  std::vector<bool> batch_size;

  int64_t elements() const;
};

struct OnnxModel {
  std::shared_ptr<onnx::ModelProto> proto;  // Never null after ReadOnnx / ParseOnnx.
  int64_t opset = 0;                        // The default domain's opset.
  std::string source;                       // The path, for messages.
  std::map<std::string, ConstTensor> initializers;
};

// Parses `bytes` as an ONNX model. `dir` is the directory external data is read from; empty
// refuses external data. INVALID_ARGUMENT naming `source` and what is wrong.
Result<OnnxModel> ParseOnnx(std::span<const uint8_t> bytes, const std::string& source,
                            const std::string& dir);

// Reads `path` (a regular file, symlinks refused, at most kMaxOnnxFileBytes) and parses it with
// external data taken from its directory.
Result<OnnxModel> ReadOnnx(const std::string& path);

// Decodes one TensorProto (an initializer, a Constant's value or a test's input_N.pb).
// `dir`: as for ParseOnnx. `budget`: bytes of external data still allowed, decremented.
Result<ConstTensor> DecodeTensor(const onnx::TensorProto& tensor, const std::string& dir,
                                 uint64_t* budget);

// Parses a serialized TensorProto (the ONNX node tests' input_N.pb / output_N.pb).
Result<ConstTensor> ReadTensorFile(const std::string& path);

}  // namespace ferry::onnx_import
