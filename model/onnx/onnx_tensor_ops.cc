// Converters of the tensor ops transformers are exported with: arithmetic with numpy
// broadcasting (Add beyond a bias, Sub, Mul, Div), Transpose, MatMul between two computed
// tensors, Unsqueeze and Squeeze (docs/models.md, "Ops"). The batch axis stays axis 0 and is
// never broadcast, permuted or reshaped, so requests in one batch never mix.
#include <algorithm>

#include "model/onnx/op_helpers.h"

namespace ferry::onnx_import {
namespace {

// The broadcast of two manifest-notation shapes (kBatchDim at axis 0 of a tensor), or nullopt.
std::optional<Shape> BroadcastShape(const Shape& a, const Shape& b) {
  Shape out = a.size() >= b.size() ? a : b;
  const Shape& shorter = a.size() >= b.size() ? b : a;
  for (size_t i = 0; i < shorter.size(); ++i) {
    int64_t& o = out[out.size() - shorter.size() + i];
    int64_t s = shorter[i];
    if (s == o || s == 1) {
      continue;
    }
    if (o != 1) {
      return std::nullopt;
    }
    o = s;
  }
  return out;
}

}  // namespace

Status Binary(Converter& c, OpKind kind) {
  const Value* a = c.Input(0);
  const Value* b = c.Input(1);
  if (a == nullptr || b == nullptr) {
    return c.Fail("needs two inputs");
  }
  if (a->constant != nullptr && b->constant != nullptr) {
    return c.Fail("arithmetic on two constants is not folded");
  }
  Op op;
  op.kind = kind;
  if (a->constant == nullptr && b->constant == nullptr) {
    if (a->shape.size() != b->shape.size()) {
      return c.Fail("two computed operands need the same rank: " + Dims(a->shape) + " and " +
                    Dims(b->shape));
    }
    std::optional<Shape> shape = BroadcastShape(a->shape, b->shape);
    if (!shape) {
      return c.Fail(Dims(a->shape) + " and " + Dims(b->shape) + " do not broadcast");
    }
    op.inputs = {a->tensor, b->tensor};
    c.Emit(op, *shape);
    return OkStatus();
  }
  const Value& x = a->constant != nullptr ? *b : *a;
  const ConstTensor& k = a->constant != nullptr ? *a->constant : *b->constant;
  if (k.integer) {
    return c.Fail("an integer constant operand is not supported (programs compute in FP32)");
  }
  if (k.batch_broadcast && k.dims.size() != x.shape.size()) {
    return c.Fail("a batch-sized constant " + Dims(k.dims) + " does not align with " +
                  Dims(x.shape));
  }
  Shape dims = k.dims.empty() ? Shape{1} : k.dims;  // A scalar: one value, broadcast.
  if (dims.size() > x.shape.size() || (dims.size() == x.shape.size() && dims[0] != 1)) {
    return c.Fail("the constant " + Dims(k.dims) + " would span the batch axis of " +
                  Dims(x.shape));
  }
  std::optional<Shape> shape = BroadcastShape(x.shape, dims);
  if (!shape) {
    return c.Fail(Dims(x.shape) + " and " + Dims(k.dims) + " do not broadcast");
  }
  op.inputs = {x.tensor};
  op.weight = c.AddWeight(".constant", dims, k.floats);
  op.reverse = a->constant != nullptr;
  c.Emit(op, *shape);
  return OkStatus();
}

// x OP value, or value OP x when `reverse`: the scalar a weight of shape [1].
Status WithScalar(Converter& c, const Value& x, OpKind kind, float value, bool reverse) {
  Op op;
  op.kind = kind;
  op.inputs = {x.tensor};
  op.weight = c.AddWeight(".constant", {1}, {value});
  op.reverse = reverse;
  c.Emit(op, x.shape);
  return OkStatus();
}

Status Neg(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  return WithScalar(c, *x, OpKind::kMul, -1.0f, false);
}

Status Reciprocal(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  return WithScalar(c, *x, OpKind::kDiv, 1.0f, true);
}

// A constant scalar exponent of 0.5, 1, 2, 3 or -1: what exported models use (variance,
// RMS and layer norms), each written as the exact ops it stands for.
Status Pow(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* e, c.Constant(1));
  if (e->elements() != 1) {
    return c.Fail("the exponent must be one constant value");
  }
  double power = e->integer ? static_cast<double>(e->ints[0]) : e->floats[0];
  Op op;
  op.inputs = {x->tensor, x->tensor};
  if (power == 1) {
    c.Define(0, *x);
  } else if (power == 0.5) {
    op.kind = OpKind::kSqrt;
    op.inputs = {x->tensor};
    c.Emit(op, x->shape);
  } else if (power == -1) {
    return WithScalar(c, *x, OpKind::kDiv, 1.0f, true);
  } else if (power == 2 || power == 3) {
    op.kind = OpKind::kMul;
    Op& square = c.Emit(op, x->shape);
    if (power == 3) {
      op.inputs = {square.output, x->tensor};
      c.Emit(op, x->shape);
    }
  } else {
    return c.Fail("exponent " + std::to_string(power) +
                  " is not supported (ferry converts 0.5, 1, 2, 3 and -1)");
  }
  return OkStatus();
}

Status Sub(Converter& c, Attributes&) { return Binary(c, OpKind::kSub); }
Status Mul(Converter& c, Attributes&) { return Binary(c, OpKind::kMul); }
Status Div(Converter& c, Attributes&) { return Binary(c, OpKind::kDiv); }

Status Transpose(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::vector<int64_t> perm = attrs.Ints("perm", {});
  if (perm.empty()) {  // The default reverses the axes, moving the batch axis.
    return c.Fail("perm is required (the default would move the batch axis)");
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = sorted.size() == x->shape.size();
  for (size_t i = 0; permutation && i < sorted.size(); ++i) {
    permutation = sorted[i] == static_cast<int64_t>(i);
  }
  if (!permutation || perm[0] != 0) {
    return c.Fail("perm must reorder every axis of " + Dims(x->shape) + " and keep axis 0 first");
  }
  Op op;
  op.kind = OpKind::kTranspose;
  op.inputs = {x->tensor};
  op.perm = perm;
  Shape shape;
  for (int64_t axis : perm) {
    shape.push_back(x->shape[static_cast<size_t>(axis)]);
  }
  c.Emit(op, shape);
  return OkStatus();
}

Status MatMulOfTensors(Converter& c, const Value& a, const Value& b) {
  size_t r = a.shape.size();
  if (r < 3 || b.shape.size() != r ||
      !std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()) ||
      a.shape[r - 1] != b.shape[r - 2]) {
    return c.Fail(
        "a product of two computed tensors needs [N, ..., M, K] x [N, ..., K, P] with "
        "equal leading axes, got " +
        Dims(a.shape) + " x " + Dims(b.shape));
  }
  Op op;
  op.kind = OpKind::kMatMul;
  op.inputs = {a.tensor, b.tensor};
  Shape shape = a.shape;
  shape.back() = b.shape.back();
  c.Emit(op, shape);
  return OkStatus();
}

// Unsqueeze (insert = true) or Squeeze: a reshape that adds or drops size-1 axes after axis 0.
Status ReshapeAxes(Converter& c, Attributes& attrs, bool insert) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::vector<int64_t> axes;
  if (c.opset() >= 13) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* given, c.Constant(1));
    if (!given->integer) {
      return c.Fail("axes must be a constant integer vector");
    }
    axes = given->ints;
  } else {
    axes = attrs.Ints("axes", {});
  }
  size_t rank = x->shape.size() + (insert ? axes.size() : 0);
  std::vector<bool> marked(rank, false);
  for (int64_t axis : axes) {
    std::optional<int64_t> a = NormalAxis(axis, rank);
    if (!a || *a == 0 || marked[static_cast<size_t>(*a)] ||
        (!insert && x->shape[static_cast<size_t>(*a)] != 1)) {
      return c.Fail("axes must name distinct axes after the batch axis" +
                    std::string(insert ? "" : ", each of size 1") + ", got " + Dims(axes));
    }
    marked[static_cast<size_t>(*a)] = true;
  }
  if (axes.empty()) {
    return c.Fail("axes are required (the batch axis must never be squeezed)");
  }
  Shape shape;
  for (size_t i = 0, from = 0; i < (insert ? rank : x->shape.size()); ++i) {
    if (insert) {
      shape.push_back(marked[i] ? 1 : x->shape[from++]);
    } else if (!marked[i]) {
      shape.push_back(x->shape[i]);
    }
  }
  if (shape.size() < 2) {
    return c.Fail("the result " + Dims(shape) + " keeps no axis after the batch axis");
  }
  Op op;
  op.kind = OpKind::kReshape;
  op.inputs = {x->tensor};
  op.shape = Shape(shape.begin() + 1, shape.end());
  c.Emit(op, shape);
  return OkStatus();
}

Status Unsqueeze(Converter& c, Attributes& attrs) { return ReshapeAxes(c, attrs, true); }
Status Squeeze(Converter& c, Attributes& attrs) { return ReshapeAxes(c, attrs, false); }

}  // namespace ferry::onnx_import
