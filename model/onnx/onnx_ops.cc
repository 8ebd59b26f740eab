// One converter per supported ONNX op (docs/models.md, "Ops"). Each reads its attributes
// (anything left unread is refused by the caller), checks its operands and emits ferry ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "model/onnx/folding.h"
#include "model/onnx/op_helpers.h"
#include "model/shape_inference.h"

namespace ferry::onnx_import {

std::string Dims(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + (shape[i] == kBatchDim ? std::string("N") : std::to_string(shape[i]));
  }
  return out + "]";
}

std::optional<int64_t> NormalAxis(int64_t axis, size_t rank) {
  auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) {
    return std::nullopt;
  }
  return axis < 0 ? axis + r : axis;
}

int64_t Product(const Shape& shape, size_t from) {
  return std::accumulate(shape.begin() + static_cast<std::ptrdiff_t>(from), shape.end(), int64_t{1},
                         std::multiplies<>());
}

Result<std::vector<float>> ChannelVector(Converter& c, const ConstTensor& t, int64_t channels,
                                         const std::string& what) {
  bool shaped = !t.dims.empty() && t.dims.back() == channels && Product(t.dims, 0) == channels;
  if (t.integer || (!shaped && t.elements() != 1)) {
    return c.Fail(what + " must be a float vector of " + std::to_string(channels) +
                  " values (or one value), got " + Dims(t.dims));
  }
  return shaped ? t.floats : std::vector<float>(static_cast<size_t>(channels), t.floats[0]);
}

namespace {

Status Unary(Converter& c, OpKind kind) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  Op op;
  op.kind = kind;
  op.inputs = {x->tensor};
  c.Emit(op, x->shape);
  return OkStatus();
}

// A tensor or a constant (PyTorch's exporter shares equal constants through Identity).
Status Identity(Converter& c, Attributes&) {
  const Value* x = c.Input(0);
  if (x == nullptr) {
    return c.Fail("needs an input");
  }
  c.Define(0, *x);
  return OkStatus();
}

// Inference: the data passes through. A training_mode that is not a constant false is refused.
Status Dropout(Converter& c, Attributes& attrs) {
  attrs.Int("seed", 0);
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (c.Input(2) != nullptr) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* mode, c.Constant(2));
    bool training = mode->integer ? (mode->ints.empty() || mode->ints[0] != 0)
                                  : (mode->floats.empty() || mode->floats[0] != 0);
    if (training) {
      return c.Fail("training_mode must be false for inference");
    }
  }
  c.Define(0, *x);
  return OkStatus();
}

Status LayerNormalization(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", -1), x->shape.size());
  if (!axis || *axis != static_cast<int64_t>(x->shape.size()) - 1 || *axis == 0) {
    return c.Fail("only normalization over the last axis (after the batch axis) is supported");
  }
  if (attrs.Int("stash_type", 1) != 1) {
    return c.Fail("stash_type must be 1 (FP32)");
  }
  int64_t d = x->shape.back();
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* scale, c.Constant(1));
  FERRY_ASSIGN_OR_RETURN(std::vector<float> gamma, ChannelVector(c, *scale, d, "Scale"));
  std::vector<float> beta(static_cast<size_t>(d), 0.0f);
  if (c.Input(2) != nullptr) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* bias, c.Constant(2));
    FERRY_ASSIGN_OR_RETURN(beta, ChannelVector(c, *bias, d, "B"));
  }
  Op op;
  op.kind = OpKind::kLayerNorm;
  op.inputs = {x->tensor};
  op.eps = attrs.Float("epsilon", 1e-5f);
  op.weight = c.AddWeight(".weight", {d}, std::move(gamma));
  op.bias = c.AddWeight(".bias", {d}, std::move(beta));
  c.Emit(op, x->shape);
  return OkStatus();
}

// Add of a constant: the bias of the dense or conv2d that alone feeds it.
Status FoldBias(Converter& c, const Value& x, const ConstTensor& constant) {
  Op* producer = c.SoleProducer(x);
  bool dense = producer != nullptr && producer->kind == OpKind::kDense;
  bool conv = producer != nullptr && producer->kind == OpKind::kConv2d;
  if ((!dense && !conv) || !producer->bias.empty()) {
    return c.Fail(
        "Add of a constant is supported only as the bias of the Gemm, MatMul or Conv "
        "before it");
  }
  int64_t channels = conv ? x.shape[1] : x.shape.back();
  Shape dims = constant.dims;
  if (conv) {  // [C, 1, 1] or [1, C, 1, 1] broadcast over [N, C, H, W].
    bool per_channel = dims.size() >= 3 && dims.size() <= 4 && dims[dims.size() - 1] == 1 &&
                       dims[dims.size() - 2] == 1 && dims[dims.size() - 3] == channels &&
                       (dims.size() == 3 || dims[0] == 1);
    if (!per_channel) {
      return c.Fail("a Conv's bias must be shaped [C, 1, 1] or [1, C, 1, 1], got " + Dims(dims));
    }
    dims = {channels};
  }
  if (dims.size() > x.shape.size()) {
    return c.Fail("the bias " + Dims(constant.dims) + " has more axes than " + Dims(x.shape));
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<float> values,
                         ChannelVector(c, constant, channels, "the bias"));
  producer->bias = c.AddWeight(".bias", {channels}, std::move(values));
  c.Define(0, x);
  return OkStatus();
}

// A constant added after a Gemm, MatMul or Conv is its bias; any other Add broadcasts.
Status Add(Converter& c, Attributes&) {
  const Value* a = c.Input(0);
  const Value* b = c.Input(1);
  if (a != nullptr && b != nullptr && (a->constant == nullptr) != (b->constant == nullptr)) {
    const Value& x = a->constant != nullptr ? *b : *a;
    const ConstTensor& k = a->constant != nullptr ? *a->constant : *b->constant;
    Op* producer = c.SoleProducer(x);
    if (producer != nullptr && producer->bias.empty() &&
        (producer->kind == OpKind::kDense || producer->kind == OpKind::kConv2d) &&
        FoldBias(c, x, k).ok()) {
      return OkStatus();
    }
  }
  return Binary(c, OpKind::kAdd);
}

// `values` of a [rows, cols] matrix, transposed.
std::vector<float> Transposed(const std::vector<float>& values, int64_t rows, int64_t cols) {
  std::vector<float> out(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      out[static_cast<size_t>(k * rows + r)] = values[static_cast<size_t>(r * cols + k)];
    }
  }
  return out;
}

// x [..., in] times a constant [in, out] (or [out, in] when `transposed`), plus `bias`.
Status Dense(Converter& c, const Value& x, const ConstTensor& w, bool transposed,
             const ConstTensor* bias) {
  int64_t in = x.shape.back();
  if (w.integer || w.dims.size() != 2 || w.dims[transposed ? 1 : 0] != in) {
    return c.Fail("the weight must be a float matrix with " + std::to_string(in) +
                  " (the input's last axis) " + (transposed ? "columns" : "rows") + ", got " +
                  Dims(w.dims));
  }
  int64_t out = w.dims[transposed ? 0 : 1];
  Op op;
  op.kind = OpKind::kDense;
  op.inputs = {x.tensor};
  op.weight =
      c.AddWeight(".weight", {out, in}, transposed ? w.floats : Transposed(w.floats, in, out));
  if (bias != nullptr) {
    FERRY_ASSIGN_OR_RETURN(std::vector<float> b, ChannelVector(c, *bias, out, "C"));
    op.bias = c.AddWeight(".bias", {out}, std::move(b));
  }
  Shape shape = x.shape;
  shape.back() = out;
  c.Emit(op, shape);
  return OkStatus();
}

Status Gemm(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* a, c.Tensor(0));
  if (a->shape.size() != 2) {
    return c.Fail("A must be a matrix, got " + Dims(a->shape));
  }
  if (attrs.Int("transA", 0) != 0) {
    return c.Fail("transA=1 would transpose the batch axis");
  }
  if (attrs.Float("alpha", 1.0f) != 1.0f || attrs.Float("beta", 1.0f) != 1.0f) {
    return c.Fail("only alpha = beta = 1 is supported");
  }
  bool trans_b = attrs.Int("transB", 0) != 0;
  if (c.Input(1) != nullptr && c.Input(1)->constant == nullptr) {
    return c.Fail("B must be a constant: a product of two computed tensors is not supported");
  }
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* b, c.Constant(1));
  const ConstTensor* bias = nullptr;
  if (c.Input(2) != nullptr) {
    FERRY_ASSIGN_OR_RETURN(bias, c.Constant(2));
  }
  return Dense(c, *a, *b, trans_b, bias);
}

Status MatMul(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* a, c.Tensor(0));
  if (a->shape.size() < 2) {
    return c.Fail("A must have at least two axes, got " + Dims(a->shape));
  }
  if (c.Input(1) != nullptr && c.Input(1)->constant == nullptr) {
    return MatMulOfTensors(c, *a, *c.Input(1));
  }
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* b, c.Constant(1));
  return Dense(c, *a, *b, false, nullptr);
}

Status Flatten(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (NormalAxis(attrs.Int("axis", 1), x->shape.size() + 1) != 1) {
    return c.Fail("only axis 1 (keeping the batch axis) is supported");
  }
  Op op;
  op.kind = OpKind::kFlatten;
  op.inputs = {x->tensor};
  c.Emit(op, {kBatchDim, Product(x->shape, 1)});
  return OkStatus();
}

Status Reshape(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* target, c.Folded(1));
  bool allow_zero = attrs.Int("allowzero", 0) != 0;
  if (!target->integer || target->dims.size() != 1 || target->ints.size() < 2 ||
      target->ints.size() > kMaxOnnxRank) {
    return c.Fail("the shape must be a constant integer vector of 2 to " +
                  std::to_string(kMaxOnnxRank) + " values (the batch axis first)");
  }
  const std::vector<int64_t>& want = target->ints;
  bool batch_first = IsBatchSize(*target, 0);
  if (want[0] != 0 && want[0] != -1 && !batch_first) {
    return c.Fail(
        "the first value of the shape must be 0, -1 or the input's batch size so the batch "
        "axis is kept");
  }
  if (target->batch_broadcast ||
      std::find(target->batch_size.begin() + (batch_first ? 1 : 0), target->batch_size.end(),
                true) != target->batch_size.end()) {
    return c.Fail("the batch size may only be the first value of the shape");
  }
  int64_t total = Product(x->shape, 1);  // At most 2^40: the converter checks every row.
  Shape rest;
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t i = 1; i < want.size(); ++i) {
    int64_t d = want[i] == 0 && !allow_zero && i < x->shape.size() ? x->shape[i] : want[i];
    if (d == -1 && !infer && want[0] != -1) {
      infer = i - 1;
      d = 1;
    } else if (d < 1 || d > (int64_t{1} << 31)) {
      return c.Fail("shape value " + std::to_string(want[i]) + " at " + std::to_string(i) +
                    " is not supported");
    } else if (d > total / known) {  // known <= total, so this never overflows.
      return c.Fail("cannot reshape " + Dims(x->shape) + " to " + Dims(want));
    } else {
      known *= d;
    }
    rest.push_back(d);
  }
  if (want[0] == -1 && infer) {
    return c.Fail("two values of the shape are -1");
  }
  if (infer) {
    rest[*infer] = known > 0 && total % known == 0 ? total / known : 0;
  }
  if (Product(rest, 0) != total || (infer && rest[*infer] < 1)) {
    return c.Fail("cannot reshape " + Dims(x->shape) + " to " + Dims(want));
  }
  Op op;
  op.kind = OpKind::kReshape;
  op.inputs = {x->tensor};
  op.shape = rest;
  Shape shape = {kBatchDim};
  shape.insert(shape.end(), rest.begin(), rest.end());
  c.Emit(op, shape);
  return OkStatus();
}

Status ConstantNode(Converter& c, Attributes& attrs) {
  ConstTensor value;
  if (const onnx::TensorProto* t = attrs.Tensor("value")) {
    uint64_t no_external = 0;
    Result<ConstTensor> decoded = DecodeTensor(*t, "", &no_external);
    if (!decoded.ok()) {
      return c.Fail(decoded.error().message);
    }
    value = std::move(*decoded);
  } else if (attrs.Has("value_float")) {
    value.floats = {attrs.Float("value_float", 0)};
  } else if (attrs.Has("value_floats")) {
    return c.Fail("value_floats is not supported (use value)");
  } else if (attrs.Has("value_int")) {
    value.integer = true;
    value.ints = {attrs.Int("value_int", 0)};
  } else if (attrs.Has("value_ints")) {
    value.integer = true;
    value.ints = attrs.Ints("value_ints", {});
    value.dims = {static_cast<int64_t>(value.ints.size())};
  } else {
    return c.Fail("only value, value_float, value_int and value_ints are supported");
  }
  Shape dims = value.dims;
  c.Define(0, Value{"", dims, c.Keep(std::move(value))});
  return OkStatus();
}

// Clip (ReLU6 and friends): min and max are attributes before version 11 and optional constant
// inputs from it; an absent bound is the float range's end.
Status Clip(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  const float kLimit = std::numeric_limits<float>::max();
  float bounds[2] = {-kLimit, kLimit};
  if (c.opset() < 11) {
    bounds[0] = attrs.Float("min", -kLimit);
    bounds[1] = attrs.Float("max", kLimit);
  }
  for (int i = 1; i <= 2; ++i) {
    if (c.Input(i) == nullptr) {
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* bound, c.Constant(i));
    if (bound->integer || bound->floats.size() != 1) {
      return c.Fail(std::string(i == 1 ? "min" : "max") + " must be one float constant");
    }
    bounds[i - 1] = std::max(-kLimit, std::min(kLimit, bound->floats[0]));
  }
  if (!(bounds[0] <= bounds[1])) {
    return c.Fail("min must not exceed max");
  }
  Op op;
  op.kind = OpKind::kClip;
  op.inputs = {x->tensor};
  op.min = bounds[0];
  op.max = bounds[1];
  c.Emit(op, x->shape);
  return OkStatus();
}

// An embedding lookup: the table a constant [V, D], the indices an integer model input,
// which gets range = [0, V - 1] so the hook host checks every index before a batch forms.
// ONNX allows negative indices (counting from the end); ferry's range refuses them with 400.
Status Gather(Converter& c, Attributes& attrs) {
  if (c.Input(0) != nullptr && c.Input(0)->constant == nullptr) {
    return GatherOfTensor(c, attrs);
  }
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* table, c.Constant(0));
  FERRY_ASSIGN_OR_RETURN(const Value* indices, c.Tensor(1));
  if (attrs.Int("axis", 0) != 0) {
    return c.Fail("only axis 0 (a row lookup in a constant table) is supported");
  }
  if (table->integer || table->dims.size() != 2 || table->dims[0] < 1 || table->dims[1] < 1) {
    return c.Fail("the table must be a constant float matrix [rows, width]");
  }
  if (table->dims[0] > kMaxGatherRows) {
    return c.Fail("the table has " + std::to_string(table->dims[0]) +
                  " rows; at most 2^24 (indices are exact in FP32 only that far)");
  }
  TensorSpec* input = c.ModelInput(indices->tensor);
  if (input == nullptr || !IsInteger(input->dtype) || input->dtype == DType::kBool) {
    return c.Fail("the indices must be an integer input of the model");
  }
  int64_t last = table->dims[0] - 1;
  input->range =
      std::array<int64_t, 2>{0, input->range ? std::min((*input->range)[1], last) : last};
  Op op;
  op.kind = OpKind::kGather;
  op.inputs = {indices->tensor};
  op.weight = c.AddWeight(".table", table->dims, table->floats);
  Shape shape = indices->shape;
  shape.push_back(table->dims[1]);
  c.Emit(op, shape);
  return OkStatus();
}

// To FLOAT only, which inside a program is nothing: every input arrives converted to FP32.
Status Cast(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (attrs.Int("to", 0) != onnx::TensorProto::FLOAT) {
    return c.Fail("only a cast to FLOAT is supported (programs compute in FP32)");
  }
  c.Define(0, *x);
  return OkStatus();
}

Status Relu(Converter& c, Attributes&) { return Unary(c, OpKind::kRelu); }
Status Sigmoid(Converter& c, Attributes&) { return Unary(c, OpKind::kSigmoid); }
Status Tanh(Converter& c, Attributes&) { return Unary(c, OpKind::kTanh); }
Status Sqrt(Converter& c, Attributes&) { return Unary(c, OpKind::kSqrt); }
Status Exp(Converter& c, Attributes&) { return Unary(c, OpKind::kExp); }
Status Log(Converter& c, Attributes&) { return Unary(c, OpKind::kLog); }

// Each op with the versions (an op schema's since_version) whose semantics its converter
// implements: for a model's opset, the version in effect is the newest one not after it.
const std::map<std::string, OpEntry>& Table() {
  static const auto* table = new std::map<std::string, OpEntry>{
      {"Add", {Add, {7, 13, 14}, FoldAdd}},
      {"BatchNormalization", {BatchNormalization, {9, 14, 15}}},
      {"Cast", {Cast, {6, 9, 13}, FoldCast}},
      {"Clip", {Clip, {6, 11, 12, 13}}},
      {"ArgMax", {ArgMax, {1, 11, 12, 13}}},
      {"AveragePool", {AveragePool, {7, 10, 11}}},
      {"Concat", {ConcatTensors, {4, 11, 13}, Concat}},
      {"Constant", {ConstantNode, {9, 11, 12, 13}}},
      {"ConstantOfShape", {nullptr, {9}, ConstantOfShape}},
      {"Conv", {Conv, {1, 11}}},
      {"Div", {Div, {7, 13, 14}, FoldDiv}},
      {"Dropout", {Dropout, {12, 13}}},
      {"Equal", {nullptr, {7, 11, 13}, Equal}},
      {"Exp", {Exp, {6, 13}}},
      {"Expand", {Expand, {8, 13}, FoldExpand}},
      {"Flatten", {Flatten, {1, 9, 11, 13}}},
      {"HardSigmoid", {HardSigmoid, {6}}},
      {"HardSwish", {HardSwish, {14}}},
      {"Gather", {Gather, {1, 11, 13}, FoldGather}},
      {"Gemm", {Gemm, {9, 11, 13}}},
      {"GlobalAveragePool", {GlobalAveragePool, {1}}},
      {"Identity", {Identity, {1, 13, 14, 16}}},
      {"LayerNormalization", {LayerNormalization, {17}}},
      {"LeakyRelu", {LeakyRelu, {6, 16}}},
      {"Log", {Log, {6, 13}}},
      {"LogSoftmax", {LogSoftmax, {13}}},
      {"MatMul", {MatMul, {1, 9, 13}}},
      {"MaxPool", {MaxPool, {8, 10, 11, 12}}},
      {"Mul", {Mul, {7, 13, 14}, FoldMul}},
      {"Neg", {Neg, {6, 13}}},
      {"Pad", {Pad, {2, 11, 13}}},
      {"Pow", {Pow, {7, 12, 13, 15}, FoldPow}},
      {"Range", {nullptr, {11}, Range}},
      {"Reciprocal", {Reciprocal, {6, 13}}},
      {"ReduceMax", {ReduceMax, {1, 11, 12, 13}}},
      {"ReduceMean", {ReduceMean, {1, 11, 13}}},
      {"ReduceSum", {ReduceSum, {1, 11, 13}}},
      {"Relu", {Relu, {6, 13, 14}}},
      {"Reshape", {Reshape, {5, 13, 14}, FoldReshape}},
      {"Shape", {ShapeOf, {1, 13, 15}, ShapeOf}},
      {"Sigmoid", {Sigmoid, {6, 13}}},
      {"Slice", {SliceOp, {10, 11, 13}, FoldSlice}},
      {"Softmax", {Softmax, {13}}},
      {"Split", {Split, {2, 11, 13}}},
      {"Sqrt", {Sqrt, {6, 13}}},
      {"Squeeze", {Squeeze, {1, 11, 13}, FoldSqueeze}},
      {"Sub", {Sub, {7, 13, 14}, FoldSub}},
      {"Tanh", {Tanh, {6, 13}}},
      {"Transpose", {Transpose, {1, 13}}},
      {"Unsqueeze", {Unsqueeze, {1, 11, 13}, FoldUnsqueeze}},
      {"Where", {nullptr, {9, 16}, Where}},
  };
  return *table;
}

}  // namespace

const OpEntry* FindOpConverter(const std::string& op_type) {
  auto it = Table().find(op_type);
  return it == Table().end() ? nullptr : &it->second;
}

std::string SupportedOps() {
  std::string out;
  for (const auto& [name, unused] : Table()) {
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

}  // namespace ferry::onnx_import
