// Shape computations folded at import (folding.h): what PyTorch exports for x.view(x.size(0),
// ...), buffer slices, expanded masks and x[:, 0], and every way folding must refuse (the batch
// size in arithmetic or compared with a positive number, results past the element budget).
#include "model/onnx/folding.h"

#include <doctest/doctest.h>

#include <limits>

#include "model/onnx/test_graphs.h"

namespace ferry::onnx_import {
namespace {

using namespace graphs;  // NOLINT: the graph builders.

// x [N, 16, 32] viewed as [N, 16, 4, 8] through x.size(0), x.size(1) read from its shape.
onnx::ModelProto ViewModel() {
  onnx::ModelProto m = Model({16, 32});
  IntInit(m, "zero", {}, {0});
  IntInit(m, "one", {}, {1});
  IntInit(m, "axes0", {1}, {0});
  IntInit(m, "tail", {2}, {4, 8});
  Node(m, "Shape", {"x"}, "s");
  Node(m, "Gather", {"s", "zero"}, "n");
  Node(m, "Gather", {"s", "one"}, "len");
  Node(m, "Unsqueeze", {"n", "axes0"}, "n1");
  Node(m, "Unsqueeze", {"len", "axes0"}, "len1");
  IntAttr(Node(m, "Concat", {"n1", "len1", "tail"}, "target"), "axis", 0);
  Node(m, "Reshape", {"x", "target"}, "v");
  Node(m, "Relu", {"v"}, "y");
  Output(m, "y");
  return m;
}

TEST_CASE("x.view(x.size(0), x.size(1), 4, 8): the shape chain folds into one reshape") {
  Result<ImportedModel> r = Import(ViewModel());
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const std::vector<Op>& program = r->manifest.program;
  REQUIRE(program.size() == 2);
  CHECK(program[0].kind == OpKind::kReshape);
  CHECK(program[0].shape == Shape{16, 4, 8});
  CHECK(r->manifest.outputs[0].shape == Shape{kBatchDim, 16, 4, 8});
}

TEST_CASE("the batch size is refused where only the running batch could decide") {
  SUBCASE("in arithmetic") {
    onnx::ModelProto m = Model({16, 32});
    IntInit(m, "zero", {}, {0});
    IntInit(m, "two", {}, {2});
    IntInit(m, "axes0", {1}, {0});
    IntInit(m, "rest", {1}, {256});
    Node(m, "Shape", {"x"}, "s");
    Node(m, "Gather", {"s", "zero"}, "n");
    Node(m, "Div", {"n", "two"}, "half");  // view(x.size(0) // 2, ...)
    Node(m, "Unsqueeze", {"half", "axes0"}, "half1");
    IntAttr(Node(m, "Concat", {"half1", "rest"}, "target"), "axis", 0);
    Node(m, "Reshape", {"x", "target"}, "y");
    Output(m, "y");
    std::string error = ErrorOf(m);
    CHECK(Contains(error, "(Div, opset 17)"));
    CHECK(Contains(error, "arithmetic on the batch size"));
  }
  SUBCASE("compared with a positive number") {
    onnx::ModelProto m = Model({4});
    IntInit(m, "two", {1}, {2});
    Node(m, "Shape", {"x"}, "s");
    Node(m, "Equal", {"s", "two"}, "e");
    Node(m, "Relu", {"x"}, "y");
    Output(m, "y");
    CHECK(Contains(ErrorOf(m), "compares the batch size with 2"));
  }
  SUBCASE("anywhere in a Reshape's shape but first") {
    onnx::ModelProto m = Model({4});
    IntInit(m, "four", {1}, {4});
    IntInit(m, "axes0", {1}, {0});
    Node(m, "Shape", {"x"}, "s");
    IntInit(m, "zero", {}, {0});
    Node(m, "Gather", {"s", "zero"}, "n");
    Node(m, "Unsqueeze", {"n", "axes0"}, "n1");
    IntAttr(Node(m, "Concat", {"four", "n1"}, "target"), "axis", 0);
    Node(m, "Reshape", {"x", "target"}, "y");
    Output(m, "y");
    CHECK(Contains(ErrorOf(m), "the first value of the shape must be 0, -1 or"));
  }
}

TEST_CASE("a buffer sliced by length and expanded to the batch becomes one broadcast constant") {
  // token_type_ids[:, :4].expand(N, 4) looked up in a table, added to x [N, 4, 2].
  onnx::ModelProto m = Model({4, 2});
  IntInit(m, "types", {1, 6}, {1, 0, 1, 0, 0, 0});
  Init(m, "table", {2, 2}, {10, 20, 30, 40});
  IntInit(m, "zero", {1}, {0});
  IntInit(m, "four", {1}, {4});
  IntInit(m, "one", {1}, {1});
  IntInit(m, "neg", {1}, {-1});
  Node(m, "Slice", {"types", "zero", "four", "one", "one"}, "sliced");
  Node(m, "Shape", {"x"}, "s");
  IntInit(m, "first2", {1}, {2});
  Node(m, "Slice", {"s", "zero", "first2"}, "n_len");  // [N, 4]
  Node(m, "Shape", {"n_len"}, "rank");
  Node(m, "ConstantOfShape", {"rank"}, "ones");  // [0, 0] (FLOAT); cast below.
  IntAttr(Node(m, "Cast", {"ones"}, "ones_i"), "to", onnx::TensorProto::INT64);
  Node(m, "Equal", {"n_len", "neg"}, "is_neg");  // Never: the batch size is positive.
  Node(m, "Where", {"is_neg", "ones_i", "n_len"}, "target");
  Node(m, "Expand", {"sliced", "target"}, "expanded");
  Node(m, "Gather", {"table", "expanded"}, "looked_up");
  Node(m, "Add", {"x", "looked_up"}, "y");
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  REQUIRE(r->manifest.program.size() == 1);
  const Op& add = r->manifest.program[0];
  CHECK(add.kind == OpKind::kAdd);
  const Weight* w = FindWeight(*r, add.weight);
  REQUIRE(w != nullptr);
  CHECK(w->shape == Shape{1, 4, 2});  // One row that broadcasts over the batch.
  CHECK(w->values == std::vector<float>{30, 40, 10, 20, 30, 40, 10, 20});
}

TEST_CASE("x[:, 1] and x[:, 2:5] of a computed tensor become slices") {
  onnx::ModelProto m = Model({6, 3});
  IntInit(m, "one", {}, {1});
  IntInit(m, "two", {1}, {2});
  IntInit(m, "five", {1}, {5});
  IntInit(m, "axis1", {1}, {1});
  IntAttr(Node(m, "Gather", {"x", "one"}, "first"), "axis", 1);
  Node(m, "Slice", {"x", "two", "five", "axis1"}, "middle");
  Output(m, "first");
  Output(m, "middle");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const std::vector<Op>& p = r->manifest.program;
  REQUIRE(p.size() == 3);
  CHECK((p[0].kind == OpKind::kSlice && p[0].axis == 1 && p[0].start == 1 && p[0].end == 2));
  CHECK((p[1].kind == OpKind::kReshape && p[1].shape == Shape{3}));
  CHECK((p[2].kind == OpKind::kSlice && p[2].start == 2 && p[2].end == 5));
  CHECK(r->manifest.outputs[1].shape == Shape{kBatchDim, 3, 3});

  SUBCASE("a step other than 1, or a cut of the batch axis, is refused") {
    onnx::ModelProto bad = Model({6});
    IntInit(bad, "zero", {1}, {0});
    IntInit(bad, "six", {1}, {6});
    IntInit(bad, "axis", {1}, {1});
    IntInit(bad, "step", {1}, {2});
    Node(bad, "Slice", {"x", "zero", "six", "axis", "step"}, "y");
    Output(bad, "y");
    CHECK(Contains(ErrorOf(bad), "needs step 1"));
    onnx::ModelProto batch = Model({6});
    IntInit(batch, "one", {1}, {1});
    IntInit(batch, "big", {1}, {1000});
    IntInit(batch, "axis", {1}, {0});
    Node(batch, "Slice", {"x", "one", "big", "axis"}, "y");
    Output(batch, "y");
    CHECK(Contains(ErrorOf(batch), "the batch axis can only be kept whole"));
  }
  SUBCASE("indices that are not consecutive are refused") {
    onnx::ModelProto bad = Model({6});
    IntInit(bad, "pick", {2}, {0, 2});
    IntAttr(Node(bad, "Gather", {"x", "pick"}, "y"), "axis", 1);
    Output(bad, "y");
    CHECK(Contains(ErrorOf(bad), "must be consecutive"));
  }
}

TEST_CASE("Pow by 0.5, 2 and 3 are sqrt and products; another exponent is refused") {
  for (const auto& one_case :
       std::vector<std::pair<float, std::vector<OpKind>>>{{0.5f, {OpKind::kSqrt}},
                                                          {2.0f, {OpKind::kMul}},
                                                          {3.0f, {OpKind::kMul, OpKind::kMul}},
                                                          {-1.0f, {OpKind::kDiv}}}) {
    float power = one_case.first;  // Named, not a structured binding: CAPTURE takes it.
    const std::vector<OpKind>& kinds = one_case.second;
    CAPTURE(power);
    onnx::ModelProto m = Model({3});
    Init(m, "e", {}, {power});
    Node(m, "Pow", {"x", "e"}, "y");
    Output(m, "y");
    Result<ImportedModel> r = Import(m);
    REQUIRE(r.ok());
    std::vector<OpKind> got;
    for (const Op& op : r->manifest.program) {
      got.push_back(op.kind);
    }
    CHECK(got == kinds);
  }
  onnx::ModelProto m = Model({3});
  Init(m, "e", {}, {1.5f});
  Node(m, "Pow", {"x", "e"}, "y");
  Output(m, "y");
  CHECK(Contains(ErrorOf(m), "exponent 1.5"));
}

TEST_CASE("hostile folds are refused before they allocate") {
  SUBCASE("ConstantOfShape of 2^31 elements") {
    onnx::ModelProto m = Model({3});
    IntInit(m, "huge", {1}, {int64_t{1} << 31});
    Node(m, "ConstantOfShape", {"huge"}, "c");
    Node(m, "Add", {"x", "c"}, "y");
    Output(m, "y");
    CHECK(Contains(ErrorOf(m), "more than 2^24 elements"));
  }
  SUBCASE("a Range of 10^9 steps, and one of no steps") {
    for (int64_t delta : {int64_t{1}, int64_t{0}}) {
      onnx::ModelProto m = Model({3});
      IntInit(m, "from", {}, {0});
      IntInit(m, "to", {}, {1000000000});
      IntInit(m, "by", {}, {delta});
      Node(m, "Range", {"from", "to", "by"}, "r");
      Node(m, "Relu", {"x"}, "y");
      Output(m, "y");
      CHECK(Contains(ErrorOf(m), "more than 2^24 elements"));
    }
  }
  SUBCASE("an Expand whose product overflows int64") {
    onnx::ModelProto m = Model({3});
    Init(m, "v", {1}, {1.0f});
    IntInit(m, "shape", {3}, {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40});
    Node(m, "Expand", {"v", "shape"}, "c");
    Node(m, "Add", {"x", "c"}, "y");
    Output(m, "y");
    CHECK(Contains(ErrorOf(m), "more than 2^24 elements"));
  }
  SUBCASE("2^26 folded elements in all") {
    onnx::ModelProto m = Model({3});
    IntInit(m, "big", {1}, {int64_t{1} << 24});
    for (int i = 0; i < 5; ++i) {
      Node(m, "ConstantOfShape", {"big"}, "c" + std::to_string(i));
    }
    Node(m, "Relu", {"x"}, "y");
    Output(m, "y");
    std::string error = ErrorOf(m);
    CHECK(Contains(error, "ConstantOfShape_5"));  // The fifth: the first four fit.
    CHECK(Contains(error, "2^26 in all"));
  }
  SUBCASE("integer arithmetic that overflows or divides by zero") {
    for (const char* op : {"Mul", "Div"}) {
      onnx::ModelProto m = Model({3});
      IntInit(m, "a", {1}, {int64_t{1} << 62});
      IntInit(m, "b", {1}, {std::string(op) == "Mul" ? 4 : 0});
      Node(m, op, {"a", "b"}, "c");
      Node(m, "Relu", {"x"}, "y");
      Output(m, "y");
      CHECK(Contains(ErrorOf(m), "overflows or divides by zero"));
    }
  }
  SUBCASE("a float cast to INT32 out of its range") {
    onnx::ModelProto m = Model({3});
    Init(m, "f", {1}, {1e20f});
    IntAttr(Node(m, "Cast", {"f"}, "c"), "to", onnx::TensorProto::INT32);
    Node(m, "Relu", {"x"}, "y");
    Output(m, "y");
    CHECK(Contains(ErrorOf(m), "does not fit the type cast to"));
  }
}

TEST_CASE("Slice of a constant clamps as ONNX says, and a huge step does not overflow") {
  // Folded values come back through FoldGraph: every input an initializer.
  auto fold = [](int64_t start, int64_t end, int64_t step) {
    onnx::ModelProto m = Model({1});
    m.mutable_graph()->clear_input();
    IntInit(m, "data", {5}, {10, 11, 12, 13, 14});
    IntInit(m, "s", {1}, {start});
    IntInit(m, "e", {1}, {end});
    IntInit(m, "a", {1}, {0});
    IntInit(m, "t", {1}, {step});
    Node(m, "Slice", {"data", "s", "e", "a", "t"}, "y");
    Output(m, "y");
    Result<OnnxModel> parsed = Parse(Bytes(m));
    REQUIRE(parsed.ok());
    Result<std::vector<ConstTensor>> got = FoldGraph(*parsed);
    REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
    return (*got)[0].ints;
  };
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  // Stepping back from before the start: clamped to element 0 (onnxruntime answers [10]).
  CHECK(fold(-100, -1000, -1) == std::vector<int64_t>{10});
  CHECK(fold(kMax, kMin, -2) == std::vector<int64_t>{14, 12, 10});
  CHECK(fold(0, 5, kMax) == std::vector<int64_t>{10});
  CHECK(fold(1, kMax, 1) == std::vector<int64_t>{11, 12, 13, 14});
  CHECK(fold(3, 1, 1).empty());
}

TEST_CASE("Range of integers near 2^63 is counted exactly") {
  onnx::ModelProto m = Model({1});
  m.mutable_graph()->clear_input();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  IntInit(m, "from", {}, {kMax - 10});
  IntInit(m, "to", {}, {kMax});
  IntInit(m, "by", {}, {3});
  Node(m, "Range", {"from", "to", "by"}, "y");
  Output(m, "y");
  Result<OnnxModel> parsed = Parse(Bytes(m));
  REQUIRE(parsed.ok());
  Result<std::vector<ConstTensor>> got = FoldGraph(*parsed);
  REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
  // 10 / 3 rounded up: 4 values. In doubles both ends are the same number: 0 values.
  CHECK((*got)[0].ints == std::vector<int64_t>{kMax - 10, kMax - 7, kMax - 4, kMax - 1});
}

TEST_CASE("an op folded only on constants says so when given a computed tensor") {
  onnx::ModelProto m = Model({3});
  Node(m, "Equal", {"x", "x"}, "y");
  Output(m, "y");
  CHECK(Contains(ErrorOf(m), "folded at import only when every input is a constant"));
}

}  // namespace
}  // namespace ferry::onnx_import
