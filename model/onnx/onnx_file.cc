#include "model/onnx/onnx_file.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>

#include "common/file.h"
#include "model/dtype_convert.h"
#include "model/mapped_file.h"

namespace ferry::onnx_import {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

// Bytes per element of the types ferry decodes; 0 for the others.
size_t ElementBytes(int32_t type) {
  switch (type) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
      return 4;
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return 2;
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
      return 8;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

bool IsFloatType(int32_t type) {
  return type == TensorProto::FLOAT || type == TensorProto::FLOAT16 ||
         type == TensorProto::BFLOAT16 || type == TensorProto::DOUBLE;
}

// Little-endian element `i` of `bytes` as the tensor's type.
void DecodeRaw(int32_t type, const uint8_t* p, ConstTensor* out) {
  switch (type) {
    case TensorProto::FLOAT: {
      float v;
      std::memcpy(&v, p, 4);
      out->floats.push_back(v);
      break;
    }
    case TensorProto::DOUBLE: {
      double v;
      std::memcpy(&v, p, 8);
      out->floats.push_back(static_cast<float>(v));
      break;
    }
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      out->floats.push_back(type == TensorProto::FLOAT16 ? F16ToFloat(bits) : Bf16ToFloat(bits));
      break;
    }
    case TensorProto::INT64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      out->ints.push_back(v);
      break;
    }
    case TensorProto::INT32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      out->ints.push_back(v);
      break;
    }
    case TensorProto::INT8:
      out->ints.push_back(static_cast<int8_t>(*p));
      break;
    default:  // UINT8, BOOL.
      out->ints.push_back(*p);
      break;
  }
}

// The typed repeated field holding the tensor's values, decoded; false when its count is not
// `count`.
bool DecodeTyped(const TensorProto& t, uint64_t count, ConstTensor* out) {
  auto take = [&](const auto& field, auto convert) {
    if (static_cast<uint64_t>(field.size()) != count) {
      return false;
    }
    for (const auto& v : field) {
      convert(v);
    }
    return true;
  };
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      return take(t.float_data(), [&](float v) { out->floats.push_back(v); });
    case TensorProto::DOUBLE:
      return take(t.double_data(), [&](double v) { out->floats.push_back(static_cast<float>(v)); });
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return take(t.int32_data(), [&](int32_t v) {
        auto bits = static_cast<uint16_t>(v);
        out->floats.push_back(t.data_type() == TensorProto::FLOAT16 ? F16ToFloat(bits)
                                                                    : Bf16ToFloat(bits));
      });
    case TensorProto::INT64:
      return take(t.int64_data(), [&](int64_t v) { out->ints.push_back(v); });
    default:  // INT32, INT8, UINT8, BOOL: int32_data.
      return take(t.int32_data(), [&](int32_t v) { out->ints.push_back(v); });
  }
}

// The external data of `t`: a regular file named relative to `dir`, inside it, and the
// [offset, offset + length) range of it, read whole.
Result<std::string> ReadExternal(const TensorProto& t, const std::string& dir, uint64_t expected,
                                 uint64_t* budget) {
  std::string where = "tensor '" + t.name() + "': external data";
  if (dir.empty()) {
    return InvalidArgument(where + " is not allowed here");
  }
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto& entry : t.external_data()) {
    auto number = [&](uint64_t* value) -> Status {
      const std::string& text = entry.value();
      if (text.empty() || text.size() > 19 ||
          text.find_first_not_of("0123456789") != std::string::npos) {
        return InvalidArgument(where + ": " + entry.key() + " '" + text + "' is not a number");
      }
      *value = std::stoull(text);
      return OkStatus();
    };
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      FERRY_RETURN_IF_ERROR(number(&offset));
    } else if (entry.key() == "length") {
      uint64_t value = 0;
      FERRY_RETURN_IF_ERROR(number(&value));
      length = value;
    } else if (entry.key() != "checksum") {
      return InvalidArgument(where + ": unknown key '" + entry.key() + "'");
    }
  }
  fs::path rel(location);
  bool escapes = location.empty() || rel.is_absolute() || location.find('\0') != std::string::npos;
  for (const fs::path& part : rel) {
    escapes = escapes || part == "..";
  }
  if (escapes) {
    return InvalidArgument(where + " location '" + location +
                           "' must be a relative path inside the model's directory");
  }
  std::error_code base_error, full_error;
  fs::path base = fs::canonical(dir, base_error);
  fs::path full = fs::weakly_canonical(base / rel, full_error);
  auto [end, unused] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (base_error || full_error || base.empty() || end != base.end()) {
    return InvalidArgument(where + " location '" + location + "' resolves outside the directory");
  }
  if (length && *length != expected) {
    return InvalidArgument(where + ": length " + std::to_string(*length) +
                           " but the tensor needs " + std::to_string(expected) + " bytes");
  }
  if (expected > *budget) {
    return InvalidArgument(where + ": the model's weights exceed " +
                           std::to_string(kMaxTotalWeightBytes) + " bytes");
  }
  *budget -= expected;
  FERRY_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(full.string()));
  if (offset > file.bytes().size() || file.bytes().size() - offset < expected) {
    return InvalidArgument(where + ": bytes [" + std::to_string(offset) + ", " +
                           std::to_string(offset + expected) + ") run past the end of '" +
                           location + "' (" + std::to_string(file.bytes().size()) + " bytes)");
  }
  const auto* p = reinterpret_cast<const char*>(file.bytes().data() + offset);
  return std::string(p, expected);
}

}  // namespace

int64_t ConstTensor::elements() const {
  return static_cast<int64_t>(integer ? ints.size() : floats.size());
}

Result<ConstTensor> DecodeTensor(const TensorProto& t, const std::string& dir, uint64_t* budget) {
  std::string where = "tensor '" + t.name() + "'";
  size_t bytes = ElementBytes(t.data_type());
  if (bytes == 0) {
    return InvalidArgument(
        where + ": data type " + std::to_string(t.data_type()) + " (" +
        TensorProto::DataType_Name(static_cast<TensorProto::DataType>(t.data_type())) +
        ") is not supported");
  }
  if (t.has_segment()) {
    return InvalidArgument(where + ": segmented tensors are not supported");
  }
  ConstTensor out;
  out.name = t.name();
  out.integer = !IsFloatType(t.data_type());
  uint64_t count = 1;
  if (t.dims_size() > static_cast<int>(kMaxOnnxRank)) {
    return InvalidArgument(where + ": " + std::to_string(t.dims_size()) +
                           " dimensions, more than " + std::to_string(kMaxOnnxRank));
  }
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > kMaxTensorElements / static_cast<uint64_t>(d))) {
      return InvalidArgument(where + ": dimension " + std::to_string(d) +
                             " is negative or the tensor exceeds 2^32 elements");
    }
    count *= static_cast<uint64_t>(d);
    out.dims.push_back(d);
  }
  uint64_t want = count * bytes;
  std::string external;
  const std::string* raw = nullptr;
  if (t.data_location() == TensorProto::EXTERNAL) {
    FERRY_ASSIGN_OR_RETURN(external, ReadExternal(t, dir, want, budget));
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }
  if (raw != nullptr) {
    if (raw->size() != want) {
      return InvalidArgument(where + ": " + std::to_string(raw->size()) + " bytes of data for " +
                             std::to_string(count) + " elements of " + std::to_string(bytes) +
                             " bytes");
    }
    (out.integer ? out.ints.reserve(count) : out.floats.reserve(count));
    const auto* p = reinterpret_cast<const uint8_t*>(raw->data());
    for (uint64_t i = 0; i < count; ++i) {
      DecodeRaw(t.data_type(), p + i * bytes, &out);
    }
    return out;
  }
  if (!DecodeTyped(t, count, &out)) {
    return InvalidArgument(where + ": the number of values does not match its dimensions (" +
                           std::to_string(count) + " elements)");
  }
  return out;
}

Result<OnnxModel> ParseOnnx(std::span<const uint8_t> bytes, const std::string& source,
                            const std::string& dir) {
  auto fail = [&](const std::string& message) { return InvalidArgument(source + ": " + message); };
  if (bytes.size() > kMaxOnnxFileBytes) {
    return fail("larger than " + std::to_string(kMaxOnnxFileBytes) + " bytes");
  }
  OnnxModel model;
  model.source = source;
  model.proto = std::make_shared<onnx::ModelProto>();
  if (!model.proto->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return fail("not an ONNX model (the protobuf does not parse: truncated or corrupt)");
  }
  const onnx::ModelProto& proto = *model.proto;
  for (const auto& opset : proto.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      model.opset = opset.version();
    }
  }
  if (model.opset < kMinOpset || model.opset > kMaxOpset) {
    return fail("opset " + std::to_string(model.opset) + ": ferry imports opsets " +
                std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset));
  }
  if (!proto.has_graph()) {
    return fail("no graph");
  }
  const onnx::GraphProto& graph = proto.graph();
  if (static_cast<size_t>(graph.node_size()) > kMaxOnnxNodes) {
    return fail(std::to_string(graph.node_size()) + " nodes, more than " +
                std::to_string(kMaxOnnxNodes));
  }
  if (static_cast<size_t>(graph.initializer_size()) > kMaxOnnxInitializers) {
    return fail(std::to_string(graph.initializer_size()) + " initializers, more than " +
                std::to_string(kMaxOnnxInitializers));
  }
  if (graph.sparse_initializer_size() > 0) {
    return fail("sparse initializers are not supported");
  }
  uint64_t budget = kMaxTotalWeightBytes;
  for (const TensorProto& t : graph.initializer()) {
    if (t.data_location() != TensorProto::EXTERNAL) {
      uint64_t size = t.raw_data().size() + t.float_data_size() * 4ull + t.int64_data_size() * 8ull;
      if (size > budget) {
        return fail("the model's weights exceed " + std::to_string(kMaxTotalWeightBytes) +
                    " bytes");
      }
      budget -= size;
    }
    Result<ConstTensor> tensor = DecodeTensor(t, dir, &budget);
    if (!tensor.ok()) {
      return fail(tensor.error().message);
    }
    if (!model.initializers.emplace(t.name(), std::move(*tensor)).second) {
      return fail("two initializers are named '" + t.name() + "'");
    }
  }
  return model;
}

Result<OnnxModel> ReadOnnx(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  std::string dir = fs::path(path).parent_path().string();
  return ParseOnnx(file.bytes(), path, dir.empty() ? "." : dir);
}

Result<ConstTensor> ReadTensorFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string bytes,
                         ReadRegularFile(path, kMaxOnnxFileBytes, Symlinks::kFollow));
  TensorProto tensor;
  if (!tensor.ParseFromString(bytes)) {
    return InvalidArgument(path + ": not a serialized ONNX TensorProto");
  }
  uint64_t budget = 0;
  Result<ConstTensor> out = DecodeTensor(tensor, "", &budget);
  if (!out.ok()) {
    return InvalidArgument(path + ": " + out.error().message);
  }
  return out;
}

}  // namespace ferry::onnx_import
