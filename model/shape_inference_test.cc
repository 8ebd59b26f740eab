// Shape inference op by op, on manifests built in code: window arithmetic (padding, stride,
// non-square kernels, a kernel exactly the padded input), reshape, and the messages.
#include "model/shape_inference.h"

#include <doctest/doctest.h>

#include <map>
#include <string>

namespace ferry {
namespace {

// One input x of `x_shape` (batch first), one op producing y.
Result<std::map<std::string, Shape>> Infer(Shape x_shape, Op op, Shape y_shape,
                                           std::map<std::string, Shape> weights = {},
                                           DType weight_dtype = DType::kF32) {
  Manifest m;
  m.name = "m";
  m.inputs = {{"x", DType::kF32, x_shape, 0}};
  m.outputs = {{"y", DType::kF32, y_shape, 0}};
  m.batch_sizes = {2};
  m.variants = {{"default", {{"x", x_shape}}, {{"y", y_shape}}}};
  op.inputs = {"x"};
  op.output = "y";
  m.program = {op};
  WeightLookup lookup = [weights,
                         weight_dtype](const std::string& name) -> std::optional<WeightSpec> {
    auto it = weights.find(name);
    if (it == weights.end()) {
      return std::nullopt;
    }
    return WeightSpec{weight_dtype, it->second};
  };
  return InferShapes(m, m.variants[0], 2, lookup);
}

Op Conv(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding) {
  Op op;
  op.kind = OpKind::kConv2d;
  op.weight = "w";
  op.stride = stride;
  op.padding = padding;
  return op;
}

TEST_CASE("conv2d: output = (in + 2 x padding - kernel) / stride + 1, per dimension") {
  // H: (10 + 2 - 3) / 2 + 1 = 5; W: (8 + 4 - 5) / 1 + 1 = 8: a non-square kernel, padded and
  // strided differently in each dimension.
  Result<std::map<std::string, Shape>> s = Infer({kBatchDim, 3, 10, 8}, Conv({2, 1}, {1, 2}),
                                                 {kBatchDim, 4, 5, 8}, {{"w", {4, 3, 3, 5}}});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  CHECK(s->at("y") == Shape{2, 4, 5, 8});
  Result<std::map<std::string, Shape>> flat =
      Infer({kBatchDim, 3, 10}, Conv({1, 1}, {0, 0}), {kBatchDim, 4, 8, 6}, {{"w", {4, 3, 3, 3}}});
  CHECK(flat.error().message.find("conv2d needs [N, C, H, W], got [2, 3, 10]") !=
        std::string::npos);
}

TEST_CASE("maxpool2d: a kernel exactly the padded input gives 1; one larger is refused") {
  Op pool;
  pool.kind = OpKind::kMaxPool2d;
  pool.kernel = {4, 4};
  pool.stride = {4, 4};
  Result<std::map<std::string, Shape>> s = Infer({kBatchDim, 2, 4, 4}, pool, {kBatchDim, 2, 1, 1});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  CHECK(s->at("y") == Shape{2, 2, 1, 1});
  pool.kernel = {5, 4};
  CHECK(Infer({kBatchDim, 2, 4, 4}, pool, {kBatchDim, 2, 1, 1})
            .error()
            .message.find("kernel 5 is larger than the padded input [2, 2, 4, 4]") !=
        std::string::npos);
  pool.kernel = {5, 4};
  pool.padding = {1, 0};  // Padded to 6: fits again.
  CHECK(Infer({kBatchDim, 2, 4, 4}, pool, {kBatchDim, 2, 1, 1}).ok());
}

TEST_CASE("reshape keeps the batch axis and needs the same element count") {
  Op reshape;
  reshape.kind = OpKind::kReshape;
  reshape.shape = {6};
  Result<std::map<std::string, Shape>> s = Infer({kBatchDim, 2, 3}, reshape, {kBatchDim, 6});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  CHECK(s->at("y") == Shape{2, 6});
  reshape.shape = {7};
  CHECK(Infer({kBatchDim, 2, 3}, reshape, {kBatchDim, 7})
            .error()
            .message.find("cannot reshape [2, 2, 3] to [2] + [7]") != std::string::npos);
}

TEST_CASE("weights are F32, F16 or BF16; an integer weight is refused") {
  auto conv = [](DType dtype) {
    return Infer({kBatchDim, 3, 4, 4}, Conv({1, 1}, {0, 0}), {kBatchDim, 2, 2, 2},
                 {{"w", {2, 3, 3, 3}}}, dtype);
  };
  CHECK(conv(DType::kF32).ok());
  CHECK(conv(DType::kF16).ok());
  CHECK(conv(DType::kBF16).ok());
  for (DType bad : {DType::kI32, DType::kU8, DType::kBool, DType::kF64}) {
    CAPTURE(static_cast<int>(bad));
    CHECK(conv(bad).error().message.find("is not F32, F16 or BF16") != std::string::npos);
  }
}

TEST_CASE("add of two tensors needs one rank and batch axis; outputs of numeric types") {
  Manifest m;
  m.name = "m";
  m.inputs = {{"x", DType::kF32, {kBatchDim, 2, 3}, 0}};
  m.outputs = {{"y", DType::kF32, {kBatchDim, 2, 3}, 0}};
  m.batch_sizes = {2};
  m.variants = {{"default", {{"x", {kBatchDim, 2, 3}}}, {{"y", {kBatchDim, 2, 3}}}}};
  Op flat;
  flat.kind = OpKind::kReshape;
  flat.inputs = {"x"};
  flat.output = "f";
  flat.shape = {6};
  Op add;
  add.kind = OpKind::kAdd;
  add.inputs = {"x", "x"};
  add.output = "y";
  m.program = {flat, add};
  WeightLookup none = [](const std::string&) { return std::nullopt; };
  CHECK(InferShapes(m, m.variants[0], 2, none).ok());
  m.program[1].inputs = {"x", "f"};  // [2, 2, 3] + [2, 6].
  CHECK(InferShapes(m, m.variants[0], 2, none)
            .error()
            .message.find("tensor 'f': [2, 6] and [2, 2, 3]: two computed operands need the same "
                          "rank and batch axis") != std::string::npos);
  m.program[1].inputs = {"x", "x"};
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kI64, DType::kU8, DType::kBool}) {
    m.outputs[0].dtype = dtype;  // Converted from FP32 by the worker.
    CHECK(InferShapes(m, m.variants[0], 2, none).ok());
  }
  m.outputs[0].dtype = DType::kF8E4M3;
  CHECK(InferShapes(m, m.variants[0], 2, none)
            .error()
            .message.find("program outputs are BOOL, integers, FP16, BF16, FP32 or FP64") !=
        std::string::npos);
}

TEST_CASE("conv2d groups: the weight holds C / groups input channels; groups divide both") {
  Op conv = Conv({1, 1}, {0, 0});
  conv.groups = 4;
  Result<std::map<std::string, Shape>> depthwise =
      Infer({kBatchDim, 4, 5, 5}, conv, {kBatchDim, 8, 3, 3}, {{"w", {8, 1, 3, 3}}});
  REQUIRE_MESSAGE(depthwise.ok(), (depthwise.ok() ? "" : depthwise.error().message));
  // A weight with all 4 input channels is the ungrouped shape: refused at groups 4.
  CHECK_FALSE(Infer({kBatchDim, 4, 5, 5}, conv, {kBatchDim, 8, 3, 3}, {{"w", {8, 4, 3, 3}}}).ok());
  conv.groups = 3;
  CHECK(Infer({kBatchDim, 4, 5, 5}, conv, {kBatchDim, 6, 3, 3}, {{"w", {6, 1, 3, 3}}})
            .error()
            .message.find("groups 3 must divide the 4 input and 6 output channels") !=
        std::string::npos);
  conv.groups = 2;
  CHECK(Infer({kBatchDim, 4, 5, 5}, conv, {kBatchDim, 3, 3, 3}, {{"w", {3, 2, 3, 3}}})
            .error()
            .message.find("must divide") != std::string::npos);
}

TEST_CASE("NumElements: the product, nullopt past 2^40 elements or for a negative dimension") {
  CHECK(NumElements({}) == 1);
  CHECK(NumElements({2, 3}) == 6);
  CHECK(NumElements({0, int64_t{1} << 50}) == 0);
  CHECK(NumElements({int64_t{1} << 20, int64_t{1} << 20}) == int64_t{1} << 40);
  CHECK_FALSE(NumElements({int64_t{1} << 21, int64_t{1} << 20}).has_value());
  CHECK_FALSE(NumElements({2, -1}).has_value());
}

TEST_CASE("inputs and op outputs over 2^40 elements, and a wrong declared output, are refused") {
  Op relu;
  relu.kind = OpKind::kRelu;
  Shape huge = {kBatchDim, int64_t{1} << 20, int64_t{1} << 20};  // 2^41 elements at batch 2.
  CHECK(Infer(huge, relu, huge).error().message.find("has more than 2^40 elements") !=
        std::string::npos);
  Op dense;
  dense.kind = OpKind::kDense;
  dense.weight = "w";
  Shape wide = {kBatchDim, int64_t{1} << 40};
  Result<std::map<std::string, Shape>> out =
      Infer({kBatchDim, 4}, dense, wide, {{"w", {int64_t{1} << 40, 4}}});
  CHECK(out.error().message.find("tensor 'y': has more than 2^40 elements") != std::string::npos);
  CHECK(Infer({kBatchDim, 4}, relu, {kBatchDim, 5})
            .error()
            .message.find("output 'y' is declared [2, 5] but the program produces [2, 4]") !=
        std::string::npos);
}

// A one-op manifest over input x (dtype `dtype`, optional range) producing y of `y_shape`.
Manifest OneOp(DType dtype, Shape x_shape, Op op, Shape y_shape,
               std::optional<std::array<int64_t, 2>> range = std::nullopt) {
  Manifest m;
  m.name = "m";
  m.inputs = {{"x", dtype, x_shape, 0, range}};
  m.outputs = {{"y", DType::kF32, y_shape, 0, std::nullopt}};
  m.batch_sizes = {2};
  m.variants = {{"default", {{"x", x_shape}}, {{"y", y_shape}}}};
  op.inputs = {"x"};
  op.output = "y";
  m.program = {op};
  return m;
}

std::string InferError(const Manifest& m, const WeightLookup& lookup) {
  Result<std::map<std::string, Shape>> shapes = InferShapes(m, m.variants[0], 2, lookup);
  return shapes.ok() ? "" : shapes.error().message;
}

TEST_CASE("program inputs of every numeric KServe type are taken (converted to FP32)") {
  Op relu;
  relu.kind = OpKind::kRelu;
  WeightLookup none = [](const std::string&) { return std::nullopt; };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32,
                      DType::kI8, DType::kU8, DType::kBool}) {
    CAPTURE(KServeName(dtype));
    CHECK(InferError(OneOp(dtype, {kBatchDim, 4}, relu, {kBatchDim, 4}), none) == "");
  }
  // A type no client can send (FP8 exists only in safetensors files) is refused by name.
  std::string error = InferError(OneOp(DType::kF8E4M3, {kBatchDim, 4}, relu, {kBatchDim, 4}), none);
  CHECK(error.find("input 'x' is F8_E4M3; program inputs are") != std::string::npos);
}

TEST_CASE("gather: an integer model input with a range inside a table of at most 2^24 rows") {
  Op gather;
  gather.kind = OpKind::kGather;
  gather.weight = "table";
  int64_t rows = 100;
  WeightLookup table = [&rows](const std::string& name) -> std::optional<WeightSpec> {
    return name == "table" ? std::optional(WeightSpec{DType::kF32, {rows, 8}}) : std::nullopt;
  };
  auto manifest = [&](DType dtype, std::optional<std::array<int64_t, 2>> range) {
    return OneOp(dtype, {kBatchDim, 5}, gather, {kBatchDim, 5, 8}, range);
  };
  CHECK(InferError(manifest(DType::kI64, std::array<int64_t, 2>{0, 99}), table) == "");
  CHECK(InferError(manifest(DType::kI32, std::array<int64_t, 2>{3, 50}), table) == "");
  // No range, one past the table, a negative low end: every index could leave the table.
  for (auto range :
       {std::optional<std::array<int64_t, 2>>{}, std::optional(std::array<int64_t, 2>{0, 100}),
        std::optional(std::array<int64_t, 2>{-1, 10})}) {
    CHECK(InferError(manifest(DType::kI64, range), table).find("declare range = [0, 99]") !=
          std::string::npos);
  }
  CHECK(InferError(manifest(DType::kF32, std::nullopt), table).find("integer model input") !=
        std::string::npos);
  CHECK(InferError(manifest(DType::kBool, std::nullopt), table).find("integer model input") !=
        std::string::npos);
  rows = (int64_t{1} << 24) + 1;  // Index 2^24 + 1 would arrive as 2^24: refused at load.
  CHECK(
      InferError(manifest(DType::kI64, std::array<int64_t, 2>{0, 5}), table).find("at most 2^24") !=
      std::string::npos);
}

TEST_CASE("reduce_mean removes its axis, never the batch axis") {
  Op mean;
  mean.kind = OpKind::kReduceMean;
  WeightLookup none = [](const std::string&) { return std::nullopt; };
  mean.axis = 1;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 6, 4}, mean, {kBatchDim, 4}), none) == "");
  mean.axis = -1;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 6, 4}, mean, {kBatchDim, 6}), none) == "");
  mean.axis = 0;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 6, 4}, mean, {6, 4}), none)
            .find("would mix the requests") != std::string::npos);
  mean.axis = 3;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 6, 4}, mean, {kBatchDim, 6}), none)
            .find("out of range") != std::string::npos);
}

TEST_CASE("pooled sizes round down, or up in ceil mode without a window in the right padding") {
  CHECK(PooledSize(112, 3, 2, 0, false) == 55);
  CHECK(PooledSize(112, 3, 2, 0, true) == 56);
  CHECK(PooledSize(6, 3, 2, 0, true) == 3);
  CHECK(PooledSize(4, 2, 2, 0, true) == 2);  // Exact: ceil changes nothing.
  // Span 5: ceil gives 4 windows, but the 4th would start at 6, in the right padding.
  CHECK(PooledSize(5, 2, 2, 1, true) == 3);
  CHECK(PooledSize(5, 2, 2, 1, false) == 3);
}

TEST_CASE("reduce_sum and reduce_max never reduce the batch axis") {
  WeightLookup none = [](const std::string&) { return std::nullopt; };
  Op arg;
  arg.kind = OpKind::kArgMax;
  arg.axis = 1;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 1 << 24}, arg, {kBatchDim}), none) == "");
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, (1 << 24) + 1}, arg, {kBatchDim}), none)
            .find("would not be exact") != std::string::npos);
  for (OpKind kind : {OpKind::kReduceSum, OpKind::kReduceMax}) {
    Op reduce;
    reduce.kind = kind;
    reduce.axis = 2;
    CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 6, 4}, reduce, {kBatchDim, 6}), none) == "");
    reduce.axis = 0;
    CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 6, 4}, reduce, {6, 4}), none)
              .find("would mix the requests") != std::string::npos);
  }
}

TEST_CASE("concat joins one axis after the batch axis; every other axis must match") {
  WeightLookup none = [](const std::string&) { return std::nullopt; };
  auto concat = [&](Shape z_shape, int64_t axis, Shape y_shape) {
    Manifest m = OneOp(DType::kF32, {kBatchDim, 2, 4}, Op{}, y_shape);
    m.inputs.push_back({"z", DType::kF32, z_shape, 0, std::nullopt});
    m.variants[0].inputs["z"] = z_shape;
    m.program[0].kind = OpKind::kConcat;
    m.program[0].inputs = {"x", "z", "x"};
    m.program[0].axis = axis;
    return InferError(m, none);
  };
  CHECK(concat({kBatchDim, 3, 4}, 1, {kBatchDim, 7, 4}) == "");
  CHECK(concat({kBatchDim, 2, 5}, -1, {kBatchDim, 2, 13}) == "");
  CHECK(concat({kBatchDim, 3, 5}, 1, {kBatchDim, 7, 5}).find("does not match") !=
        std::string::npos);
  CHECK(concat({kBatchDim, 3}, 1, {kBatchDim, 5}).find("does not match") != std::string::npos);
  CHECK(concat({kBatchDim, 2, 4}, 0, {kBatchDim, 2, 4}).find("would mix the requests") !=
        std::string::npos);
  CHECK(concat({kBatchDim, 2, 4}, 3, {kBatchDim, 2, 4}).find("out of range") != std::string::npos);
}

TEST_CASE("binary ops broadcast; transpose keeps axis 0; matmul needs equal leading axes") {
  WeightLookup weights = [](const std::string& name) -> std::optional<WeightSpec> {
    if (name == "row") return WeightSpec{DType::kF32, {4}};
    if (name == "wide") return WeightSpec{DType::kF32, {3, 4}};
    return std::nullopt;
  };
  Op mul;
  mul.kind = OpKind::kMul;
  mul.weight = "row";
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 3, 4}, mul, {kBatchDim, 3, 4}), weights) == "");
  // A constant of the input's rank whose axis 0 is not 1 would differ between requests.
  mul.weight = "wide";
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 4}, mul, {kBatchDim, 4}), weights)
            .find("may not span the batch axis") != std::string::npos);
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 2, 4}, mul, {kBatchDim, 2, 4}), weights)
            .find("does not broadcast") != std::string::npos);

  Op swap;
  swap.kind = OpKind::kTranspose;
  swap.perm = {0, 2, 1};
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 3, 4}, swap, {kBatchDim, 4, 3}), weights) == "");
  for (std::vector<int64_t> perm :
       {std::vector<int64_t>{1, 0, 2}, std::vector<int64_t>{0, 1}, std::vector<int64_t>{0, 1, 1}}) {
    swap.perm = perm;
    CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 3, 4}, swap, {kBatchDim, 3, 4}), weights)
              .find("keep axis 0") != std::string::npos);
  }

  // x [N, 3, 4] times its own transpose: a matmul of two computed tensors.
  Manifest m = OneOp(DType::kF32, {kBatchDim, 3, 4}, swap, {kBatchDim, 3, 3});
  m.program[0].perm = {0, 2, 1};
  m.program[0].output = "t";
  Op product;
  product.kind = OpKind::kMatMul;
  product.inputs = {"x", "t"};
  product.output = "y";
  m.program.push_back(product);
  CHECK(InferError(m, weights) == "");
  m.program[1].inputs = {"x", "x"};  // [3, 4] x [3, 4]: K does not match.
  CHECK(InferError(m, weights).find("matmul needs") != std::string::npos);
}

TEST_CASE("slice: a non-empty range inside one axis after the batch axis") {
  WeightLookup weights = [](const std::string&) { return std::nullopt; };
  Op slice;
  slice.kind = OpKind::kSlice;
  slice.axis = -1;
  slice.start = 1;
  slice.end = 3;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 5, 4}, slice, {kBatchDim, 5, 2}), weights) == "");
  slice.axis = 1;
  slice.end = 5;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 5, 4}, slice, {kBatchDim, 4, 4}), weights) == "");
  for (auto [start, end] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {3, 1}, {0, 6}}) {
    slice.start = start;
    slice.end = end;
    CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 5, 4}, slice, {kBatchDim, 5, 4}), weights)
              .find("is not inside axis 1") != std::string::npos);
  }
  slice.axis = 0;
  slice.start = 0;
  slice.end = 1;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 5}, slice, {kBatchDim, 5}), weights)
            .find("would cut the requests of a batch") != std::string::npos);
  slice.axis = 2;
  CHECK(InferError(OneOp(DType::kF32, {kBatchDim, 5}, slice, {kBatchDim, 5}), weights)
            .find("out of range") != std::string::npos);
}

}  // namespace
}  // namespace ferry
