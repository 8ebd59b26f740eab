#include "hookhost/request_checks.h"

#include <algorithm>
#include <cstring>

#include "shm/descriptor.h"
#include "worker/scheduler/request_splitting.h"

namespace ferry::hookhost {

std::string DescribeTensor(DType dtype, std::span<const int64_t> shape) {
  std::string text =
      std::string(KServeName(dtype).empty() ? SafetensorsName(dtype) : KServeName(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + "]";
}

bool FitsSpec(const TensorSpec& spec, DType dtype, const Shape& shape) {
  if (dtype != spec.dtype || shape.size() != spec.shape.size()) {
    return false;
  }
  for (size_t k = 0; k < shape.size(); ++k) {
    if (spec.shape[k] != kBatchDim && spec.shape[k] != shape[k]) {
      return false;
    }
  }
  return true;
}

Result<std::vector<size_t>> OrderByName(std::string_view model,
                                        const std::vector<TensorSpec>& specs,
                                        std::span<const TensorMeta> given) {
  std::string where = "model '" + std::string(model) + "': ";
  std::vector<size_t> order(specs.size(), given.size());
  for (size_t g = 0; g < given.size(); ++g) {
    auto it = std::find_if(specs.begin(), specs.end(),
                           [&](const TensorSpec& s) { return s.name == given[g].name; });
    if (it == specs.end()) {
      return InvalidArgument(where + "unknown input '" + std::string(given[g].name) + "'");
    }
    size_t s = static_cast<size_t>(it - specs.begin());
    if (order[s] != given.size()) {
      return InvalidArgument(where + "input '" + it->name + "' is given twice");
    }
    order[s] = g;
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    if (order[s] == given.size()) {
      return InvalidArgument(where + "missing input '" + specs[s].name + "'");
    }
  }
  return order;
}

Status CheckTensors(std::string_view model, const std::vector<TensorSpec>& specs,
                    std::span<const Shape> declared, std::span<const TensorMeta> tensors,
                    int64_t* rows) {
  std::string where = "model '" + std::string(model) + "': ";
  int64_t found_rows = -1;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const TensorMeta& t = tensors[i];
    const Shape& want = declared[i];
    auto mismatch = [&] {
      return InvalidArgument(where + "input '" + spec.name + "': expected " +
                             DescribeTensor(spec.dtype, want) + ", got " +
                             DescribeTensor(t.dtype, t.shape));
    };
    if (t.dtype != spec.dtype || t.shape.size() != want.size()) {
      return mismatch();
    }
    for (size_t k = 0; k < want.size(); ++k) {
      if (want[k] == kBatchDim) {
        if (t.shape[k] < 1 || t.shape[k] > shm::kMaxRowsPerRequest) {
          return InvalidArgument(where + "input '" + spec.name +
                                 "': " + std::to_string(t.shape[k]) + " rows; 1 to " +
                                 std::to_string(shm::kMaxRowsPerRequest) + " are accepted");
        }
        if (found_rows >= 0 && t.shape[k] != found_rows) {
          return InvalidArgument(where + "input '" + spec.name + "' has " +
                                 std::to_string(t.shape[k]) + " rows, another input " +
                                 std::to_string(found_rows));
        }
        found_rows = t.shape[k];
      } else if (t.shape[k] != want[k]) {
        return mismatch();
      }
    }
    if (t.dtype == DType::kBytes) {
      continue;  // Its size is its data's, checked element by element (CheckBytesTensor).
    }
    std::optional<uint64_t> bytes = TensorByteSize(t.dtype, t.shape);
    if (!bytes || *bytes != t.bytes) {
      return InvalidArgument(where + "input '" + spec.name + "': " + std::to_string(t.bytes) +
                             " bytes given, " + DescribeTensor(t.dtype, t.shape) + " has " +
                             (bytes ? std::to_string(*bytes) : std::string("too many")));
    }
  }
  *rows = found_rows >= 0 ? found_rows : 1;
  return OkStatus();
}

namespace {

// The index of the first element of `bytes` (elements of T) outside [lo, hi], or -1; *value
// gets that element as text.
template <typename T>
int64_t FirstOutside(std::span<const uint8_t> bytes, int64_t lo, int64_t hi, std::string* value) {
  size_t n = bytes.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    bool outside;
    if constexpr (std::is_same_v<T, uint64_t>) {  // May exceed INT64_MAX.
      outside =
          hi < 0 || v > static_cast<uint64_t>(hi) || (lo > 0 && v < static_cast<uint64_t>(lo));
    } else {
      outside = static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi;
    }
    if (outside) {
      *value = std::to_string(v);
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

int64_t FirstOutside(DType dtype, std::span<const uint8_t> bytes, int64_t lo, int64_t hi,
                     std::string* value) {
  switch (dtype) {
    case DType::kBool:
    case DType::kU8:
      return FirstOutside<uint8_t>(bytes, lo, hi, value);
    case DType::kI8:
      return FirstOutside<int8_t>(bytes, lo, hi, value);
    case DType::kU16:
      return FirstOutside<uint16_t>(bytes, lo, hi, value);
    case DType::kI16:
      return FirstOutside<int16_t>(bytes, lo, hi, value);
    case DType::kU32:
      return FirstOutside<uint32_t>(bytes, lo, hi, value);
    case DType::kI32:
      return FirstOutside<int32_t>(bytes, lo, hi, value);
    case DType::kU64:
      return FirstOutside<uint64_t>(bytes, lo, hi, value);
    case DType::kI64:
      return FirstOutside<int64_t>(bytes, lo, hi, value);
    default:
      return -1;  // ParseManifest allows a range on integer tensors only.
  }
}

}  // namespace

Status CheckRanges(std::string_view model, const std::vector<TensorSpec>& specs,
                   std::span<const TensorMeta> tensors,
                   std::span<const std::span<const uint8_t>> bytes) {
  for (size_t i = 0; i < specs.size() && i < tensors.size() && i < bytes.size(); ++i) {
    if (!specs[i].range) {
      continue;
    }
    auto [lo, hi] = *specs[i].range;
    std::string value;
    int64_t at = FirstOutside(tensors[i].dtype, bytes[i], lo, hi, &value);
    if (at >= 0) {
      return InvalidArgument("model '" + std::string(model) + "': input '" + specs[i].name +
                             "': element " + std::to_string(at) + " is " + value +
                             ", outside the declared range [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
    }
  }
  return OkStatus();
}

Result<int> MatchVariant(std::string_view model, const Manifest& manifest,
                         std::span<const TensorMeta> tensors, int64_t* rows) {
  std::optional<Error> first;
  for (size_t v = 0; v < manifest.variants.size(); ++v) {
    std::vector<Shape> declared;
    for (const TensorSpec& spec : manifest.request_inputs()) {
      declared.push_back(manifest.variants[v].inputs.at(spec.name));
    }
    Status s = CheckTensors(model, manifest.request_inputs(), declared, tensors, rows);
    if (s.ok()) {
      return static_cast<int>(v);
    }
    if (!first) {
      first = s.error();
    }
  }
  if (manifest.variants.size() > 1) {
    std::string names;
    for (const ShapeVariant& v : manifest.variants) {
      names += (names.empty() ? "" : ", ") + v.name;
    }
    first->message += " (no shape variant matches: " + names + ")";
  }
  return *first;
}

Result<std::vector<int64_t>> PieceRows(std::string_view model, const Manifest& manifest,
                                       int64_t rows, bool rows_preserved, size_t max_pieces) {
  std::string cannot_split;
  if (!rows_preserved) {
    cannot_split = "its preprocess does not keep rows";
  }
  for (const std::vector<TensorSpec>* side : {&manifest.inputs, &manifest.outputs}) {
    for (const TensorSpec& t : *side) {
      if (cannot_split.empty() && t.batch_axis != 0) {
        cannot_split = "tensor '" + t.name + "' does not batch on axis 0";
      }
    }
  }
  int64_t largest = manifest.unbatched() ? 0 : manifest.batch_sizes.back();
  return PlanSplit(model, rows, largest, cannot_split, max_pieces);
}

}  // namespace ferry::hookhost
