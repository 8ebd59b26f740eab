// The hook host's request checks and splitting, at their edges.
#include "hookhost/request_checks.h"

#include <doctest/doctest.h>

#include <cstring>
#include <deque>

#include "shm/descriptor.h"

namespace ferry::hookhost {
namespace {

Manifest Model(std::vector<int64_t> sizes, int output_axis = 0) {
  Manifest m;
  m.name = "m";
  TensorSpec x{"x", DType::kF32, {kBatchDim, 4}, 0};
  TensorSpec y{"y", DType::kF32, output_axis == 0 ? Shape{kBatchDim, 2} : Shape{2, kBatchDim},
               output_axis};
  m.inputs = {x};
  m.outputs = {y};
  m.batch_sizes = std::move(sizes);
  ShapeVariant v;
  v.name = "default";
  v.inputs["x"] = x.shape;
  v.outputs["y"] = y.shape;
  ShapeVariant wide = v;
  wide.name = "wide";
  wide.inputs["x"] = {kBatchDim, 8};
  m.variants = {v, wide};
  return m;
}

// A tensor of `shape`, its bytes exact. TensorMeta only views its shape, so the shapes live
// here for the whole test run.
TensorMeta Meta(std::string_view name, const Shape& shape, DType dtype = DType::kF32) {
  static std::deque<Shape> shapes;
  const Shape& kept = shapes.emplace_back(shape);
  std::optional<uint64_t> bytes = TensorByteSize(dtype, kept);
  return {name, dtype, kept, bytes.value_or(0)};
}

TEST_CASE("PieceRows: one piece up to the largest size, then full pieces and the rest") {
  Manifest m = Model({1, 4, 8});
  CHECK(PieceRows("m", m, 8, true, 256).value() == std::vector<int64_t>{8});
  CHECK(PieceRows("m", m, 9, true, 256).value() == std::vector<int64_t>{8, 1});
  CHECK(PieceRows("m", m, 24, true, 256).value() == std::vector<int64_t>{8, 8, 8});
  CHECK(PieceRows("m", m, 1, false, 1).value() == std::vector<int64_t>{1});  // No split needed.
  // At most max_pieces: 16 rows are 2 pieces, 17 are 3.
  CHECK(PieceRows("m", m, 16, true, 2).value().size() == 2);
  Result<std::vector<int64_t>> many = PieceRows("m", m, 17, true, 2);
  REQUIRE_FALSE(many.ok());
  CHECK(many.error().message ==
        "model 'm': 17 rows exceed the largest compiled batch size 8, and its 3 pieces are more "
        "than 2 (the most one request may be cut into)");
  Result<std::vector<int64_t>> kept = PieceRows("m", m, 9, false, 256);
  REQUIRE_FALSE(kept.ok());
  CHECK(kept.error().message.find("its preprocess does not keep rows") != std::string::npos);
  Result<std::vector<int64_t>> axis = PieceRows("m", Model({1, 8}, 1), 9, true, 256);
  REQUIRE_FALSE(axis.ok());
  CHECK(axis.error().message.find("tensor 'y' does not batch on axis 0") != std::string::npos);
  CHECK(PieceRows("m", Model({1, 8}, 1), 8, true, 256).ok());  // Unsplit: any axis.
}

TEST_CASE("MatchVariant: the first variant whose shapes fit; rows from the batch dimension") {
  Manifest m = Model({1, 8});
  int64_t rows = 0;
  TensorMeta narrow = Meta("x", {3, 4});
  CHECK(MatchVariant("m", m, std::span(&narrow, 1), &rows).value() == 0);
  CHECK(rows == 3);
  TensorMeta wide = Meta("x", {5, 8});
  CHECK(MatchVariant("m", m, std::span(&wide, 1), &rows).value() == 1);
  CHECK(rows == 5);
  TensorMeta neither = Meta("x", {5, 6});
  Result<int> none = MatchVariant("m", m, std::span(&neither, 1), &rows);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message ==
        "model 'm': input 'x': expected FP32 [-1, 4], got FP32 [5, 6] (no shape variant "
        "matches: default, wide)");
}

TEST_CASE("CheckTensors: rows 1 to the limit, equal across inputs, bytes exact") {
  std::vector<TensorSpec> specs{{"a", DType::kF32, {kBatchDim, 2}, 0},
                                {"b", DType::kU8, {kBatchDim}, 0}};
  std::vector<Shape> declared{specs[0].shape, specs[1].shape};
  int64_t rows = 0;
  std::vector<TensorMeta> ok{Meta("a", {3, 2}), Meta("b", {3}, DType::kU8)};
  CHECK(CheckTensors("m", specs, declared, ok, &rows).ok());
  CHECK(rows == 3);
  std::vector<TensorMeta> unequal{Meta("a", {3, 2}), Meta("b", {4}, DType::kU8)};
  CHECK(CheckTensors("m", specs, declared, unequal, &rows).error().message ==
        "model 'm': input 'b' has 4 rows, another input 3");
  std::vector<TensorMeta> zero{Meta("a", {0, 2}), Meta("b", {0}, DType::kU8)};
  CHECK(CheckTensors("m", specs, declared, zero, &rows).error().message ==
        "model 'm': input 'a': 0 rows; 1 to 1048576 are accepted");
  int64_t limit = shm::kMaxRowsPerRequest;
  std::vector<TensorMeta> at_limit{Meta("a", {limit, 2}), Meta("b", {limit}, DType::kU8)};
  CHECK(CheckTensors("m", specs, declared, at_limit, &rows).ok());
  std::vector<TensorMeta> over{Meta("a", {limit + 1, 2}), Meta("b", {limit + 1}, DType::kU8)};
  CHECK_FALSE(CheckTensors("m", specs, declared, over, &rows).ok());
  std::vector<TensorMeta> lying{Meta("a", {3, 2}), Meta("b", {3}, DType::kU8)};
  lying[1].bytes = 4;  // Says 4 bytes for 3 rows of one byte.
  CHECK(CheckTensors("m", specs, declared, lying, &rows).error().message ==
        "model 'm': input 'b': 4 bytes given, UINT8 [3] has 3");
  std::vector<TensorMeta> rank{Meta("a", {3, 2, 1}), Meta("b", {3}, DType::kU8)};
  CHECK(CheckTensors("m", specs, declared, rank, &rows).error().message ==
        "model 'm': input 'a': expected FP32 [-1, 2], got FP32 [3, 2, 1]");
}

// Little-endian bytes of `values` as T.
template <typename T>
std::vector<uint8_t> Bytes(std::initializer_list<T> values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  size_t at = 0;
  for (T v : values) {
    std::memcpy(out.data() + at, &v, sizeof(T));
    at += sizeof(T);
  }
  return out;
}

std::string RangeError(DType dtype, const std::vector<uint8_t>& bytes,
                       std::optional<std::array<int64_t, 2>> range) {
  std::vector<TensorSpec> specs = {{"ids", dtype, {kBatchDim, 1}, 0, range}};
  std::vector<TensorMeta> tensors = {{"ids", dtype, {}, bytes.size()}};
  std::vector<std::span<const uint8_t>> data = {bytes};
  Status s = CheckRanges("m", specs, tensors, data);
  return s.ok() ? "" : s.error().message;
}

TEST_CASE("CheckRanges: every element of a ranged integer input, at both ends and past them") {
  std::array<int64_t, 2> table{0, 999};
  CHECK(RangeError(DType::kI64, Bytes<int64_t>({0, 999, 5}), table) == "");
  CHECK(RangeError(DType::kI64, Bytes<int64_t>({0, 1000}), table) ==
        "model 'm': input 'ids': element 1 is 1000, outside the declared range [0, 999]");
  CHECK(RangeError(DType::kI64, Bytes<int64_t>({-1}), table).find("element 0 is -1") !=
        std::string::npos);
  CHECK(RangeError(DType::kI64, Bytes<int64_t>({INT64_MIN}), table) != "");
  CHECK(RangeError(DType::kI32, Bytes<int32_t>({7, -5}), table).find("element 1 is -5") !=
        std::string::npos);
  CHECK(RangeError(DType::kI8, Bytes<int8_t>({-128}), table) != "");
  CHECK(RangeError(DType::kU8, Bytes<uint8_t>({255}), std::array<int64_t, 2>{0, 254}) != "");
  // Above INT64_MAX: never wraps into the range.
  CHECK(RangeError(DType::kU64, Bytes<uint64_t>({uint64_t{1} << 63}), table)
            .find("9223372036854775808") != std::string::npos);
  CHECK(RangeError(DType::kU64, Bytes<uint64_t>({3}), std::array<int64_t, 2>{5, 9}) != "");
  CHECK(RangeError(DType::kU64, Bytes<uint64_t>({0}), std::array<int64_t, 2>{-5, -1}) != "");
  // No range: nothing is read.
  CHECK(RangeError(DType::kI64, Bytes<int64_t>({-7, 1LL << 40}), std::nullopt) == "");
}

TEST_CASE("OrderByName: any order; missing, unknown and repeated inputs named") {
  std::vector<TensorSpec> specs{{"a", DType::kF32, {kBatchDim}, 0},
                                {"b", DType::kF32, {kBatchDim}, 0}};
  std::vector<TensorMeta> swapped{Meta("b", {1}), Meta("a", {1})};
  CHECK(OrderByName("m", specs, swapped).value() == std::vector<size_t>{1, 0});
  std::vector<TensorMeta> missing{Meta("a", {1})};
  CHECK(OrderByName("m", specs, missing).error().message == "model 'm': missing input 'b'");
  std::vector<TensorMeta> unknown{Meta("a", {1}), Meta("b", {1}), Meta("c", {1})};
  CHECK(OrderByName("m", specs, unknown).error().message == "model 'm': unknown input 'c'");
  std::vector<TensorMeta> twice{Meta("a", {1}), Meta("a", {1})};
  CHECK(OrderByName("m", specs, twice).error().message == "model 'm': input 'a' is given twice");
}

TEST_CASE("a plugin's output fits its declaration: dtype, rank, every fixed dimension") {
  TensorSpec logits{"logits", DType::kF32, {kBatchDim, 10}, 0};
  CHECK(FitsSpec(logits, DType::kF32, {1, 10}));
  CHECK(FitsSpec(logits, DType::kF32, {64, 10}));
  CHECK_FALSE(FitsSpec(logits, DType::kF64, {1, 10}));
  CHECK_FALSE(FitsSpec(logits, DType::kF32, {1, 9}));
  CHECK_FALSE(FitsSpec(logits, DType::kF32, {10}));
  CHECK_FALSE(FitsSpec(logits, DType::kF32, {1, 10, 1}));
}

}  // namespace
}  // namespace ferry::hookhost
