// The converters of the piecewise activations (LeakyRelu, HardSigmoid, HardSwish), Softmax and
// LogSoftmax, the reductions of one axis (ReduceMean, ReduceSum, ReduceMax), Concat of computed
// tensors and Split into slices (docs/models.md, "Ops").
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/onnx/op_helpers.h"

namespace ferry::onnx_import {
namespace {

Status Piecewise(Converter& c, OpKind kind, float alpha, float beta) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (!std::isfinite(alpha) || !std::isfinite(beta)) {
    return c.Fail("alpha and beta must be finite");
  }
  Op op;
  op.kind = kind;
  op.inputs = {x->tensor};
  op.alpha = alpha;
  op.beta = beta;
  c.Emit(op, x->shape);
  return OkStatus();
}

// Softmax or LogSoftmax (version 13: along one axis) after the batch axis.
Status SoftmaxAlong(Converter& c, Attributes& attrs, OpKind kind) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", -1), x->shape.size());
  if (!axis || *axis == 0) {
    return c.Fail("axis must be one of the axes after the batch axis of " + Dims(x->shape));
  }
  Op op;
  op.kind = kind;
  op.inputs = {x->tensor};
  op.axis = *axis;
  c.Emit(op, x->shape);
  return OkStatus();
}

// Emits `op`, which removes axis op.axis of `x` (a reduction, arg_max), and for keepdims a
// reshape that puts the axis back as size 1.
void EmitAlongAxis(Converter& c, Op op, const Value& x, bool keep) {
  auto axis = static_cast<size_t>(op.axis);
  op.inputs = {x.tensor};
  Shape shape = x.shape;
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
  Op& removed = c.Emit(std::move(op), shape);
  if (keep) {
    Op reshape;
    reshape.kind = OpKind::kReshape;
    reshape.inputs = {removed.output};
    Shape kept = x.shape;
    kept[axis] = 1;
    reshape.shape = Shape(kept.begin() + 1, kept.end());
    c.Emit(reshape, kept);
  }
}

// Whether `axes` are the two spatial axes of a rank-4 tensor (x.mean([2, 3]) in PyTorch).
bool IsSpatialMean(const std::vector<int64_t>& axes, size_t rank) {
  if (rank != 4 || axes.size() != 2) {
    return false;
  }
  std::optional<int64_t> a = NormalAxis(axes[0], rank), b = NormalAxis(axes[1], rank);
  return a && b && std::min(*a, *b) == 2 && std::max(*a, *b) == 3;
}

// The mean over H and W of [N, C, H, W]: global_avgpool to [N, C], reshaped to [N, C, 1, 1]
// for keepdims.
Status SpatialMean(Converter& c, const Value& x, bool keep) {
  Op pool;
  pool.kind = OpKind::kGlobalAvgPool;
  pool.inputs = {x.tensor};
  Op& pooled = c.Emit(pool, {kBatchDim, x.shape[1]});
  if (keep) {
    Op reshape;
    reshape.kind = OpKind::kReshape;
    reshape.inputs = {pooled.output};
    reshape.shape = {x.shape[1], 1, 1};
    c.Emit(reshape, {kBatchDim, x.shape[1], 1, 1});
  }
  return OkStatus();
}

// The reduction of one axis after the batch axis; keepdims (the default) keeps it as size 1.
// The axes are an attribute, or (ReduceSum from version 13) a constant second input.
Status Reduce(Converter& c, Attributes& attrs, OpKind kind) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::vector<int64_t> axes;
  bool keep = attrs.Int("keepdims", 1) != 0;
  if (kind == OpKind::kReduceSum && c.opset() >= 13) {
    bool noop = attrs.Int("noop_with_empty_axes", 0) != 0;
    if (c.Input(1) != nullptr) {
      FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, c.Constant(1));
      if (!t->integer) {
        return c.Fail("axes must be an integer constant");
      }
      axes = t->ints;
    }
    if (axes.empty() && noop) {
      c.Define(0, *x);  // No axes with noop_with_empty_axes: the input as it is.
      return OkStatus();
    }
  } else {
    axes = attrs.Ints("axes", {});
  }
  if (kind == OpKind::kReduceMean && IsSpatialMean(axes, x->shape.size())) {
    return SpatialMean(c, *x, keep);
  }
  std::optional<int64_t> axis =
      axes.size() == 1 ? NormalAxis(axes[0], x->shape.size()) : std::nullopt;
  if (!axis || *axis == 0) {
    return c.Fail("only one axis after the batch axis is supported");
  }
  Op op;
  op.kind = kind;
  op.axis = *axis;
  EmitAlongAxis(c, std::move(op), *x, keep);
  return OkStatus();
}

// The sizes Split cuts `length` into: `split` when given (each positive, summing to the length),
// else `parts` equal pieces.
Result<std::vector<int64_t>> SplitSizes(Converter& c, std::vector<int64_t> split, int parts,
                                        int64_t length) {
  if (split.empty()) {
    if (parts < 1 || length % parts != 0) {
      return c.Fail("an axis of " + std::to_string(length) + " does not split into " +
                    std::to_string(parts) + " equal parts");
    }
    return std::vector<int64_t>(static_cast<size_t>(parts), length / parts);
  }
  int64_t sum = 0;
  for (int64_t s : split) {
    if (s < 1 || s > length) {
      return c.Fail("split sizes must be positive and fit the axis of " + std::to_string(length));
    }
    sum += s;
  }
  if (sum != length || static_cast<int>(split.size()) != parts) {
    return c.Fail("split sizes must sum to the axis (" + std::to_string(length) +
                  ") with one per output");
  }
  return split;
}

}  // namespace

// Constant padding by zeros only (PyTorch exports an AvgPool2d as a Pad of zeros first): the
// tensor as it is. Any other padding is refused.
Status Pad(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (attrs.String("mode", "constant") != "constant") {
    return c.Fail("only constant padding is supported");
  }
  std::vector<int64_t> pads;
  if (c.opset() >= 11) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, c.Constant(1));
    if (!t->integer) {
      return c.Fail("pads must be an integer constant");
    }
    pads = t->ints;
  } else {
    pads = attrs.Ints("pads", {});
    attrs.Float("value", 0.f);
  }
  for (int64_t p : pads) {
    if (p != 0) {
      return c.Fail("only zero pads (no padding) are supported; pad inside the Conv or pool");
    }
  }
  c.Define(0, *x);
  return OkStatus();
}

Status LeakyRelu(Converter& c, Attributes& attrs) {
  return Piecewise(c, OpKind::kLeakyRelu, attrs.Float("alpha", 0.01f), 0.f);
}
Status HardSigmoid(Converter& c, Attributes& attrs) {
  float alpha = attrs.Float("alpha", 0.2f);
  return Piecewise(c, OpKind::kHardSigmoid, alpha, attrs.Float("beta", 0.5f));
}
Status HardSwish(Converter& c, Attributes&) { return Piecewise(c, OpKind::kHardSwish, 0.f, 0.f); }
Status Softmax(Converter& c, Attributes& attrs) { return SoftmaxAlong(c, attrs, OpKind::kSoftmax); }
Status LogSoftmax(Converter& c, Attributes& attrs) {
  return SoftmaxAlong(c, attrs, OpKind::kLogSoftmax);
}
Status ReduceMean(Converter& c, Attributes& attrs) { return Reduce(c, attrs, OpKind::kReduceMean); }
Status ReduceSum(Converter& c, Attributes& attrs) { return Reduce(c, attrs, OpKind::kReduceSum); }
Status ReduceMax(Converter& c, Attributes& attrs) { return Reduce(c, attrs, OpKind::kReduceMax); }

// The index of the maximum along one axis after the batch axis (INT64 in ONNX: the worker
// converts the output); keepdims (the default) keeps the axis as size 1.
Status ArgMax(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", 0), x->shape.size());
  if (!axis || *axis == 0) {
    return c.Fail("axis must be one of the axes after the batch axis of " + Dims(x->shape));
  }
  if (x->shape[static_cast<size_t>(*axis)] > (int64_t{1} << 24)) {
    return c.Fail("an axis of over 2^24 elements: its indices are not exact in FP32");
  }
  bool keep = attrs.Int("keepdims", 1) != 0;
  Op op;
  op.kind = OpKind::kArgMax;
  op.axis = *axis;
  op.last_index = attrs.Int("select_last_index", 0) != 0;
  EmitAlongAxis(c, std::move(op), *x, keep);
  return OkStatus();
}

// Computed tensors of one rank joined along an axis after the batch axis. A constant among them
// is refused (its rows would not be the batch's).
Status ConcatTensors(Converter& c, Attributes& attrs) {
  int count = c.node().input_size();
  if (count < 1 || static_cast<size_t>(count) > kMaxConcatInputs) {
    return c.Fail("needs 1 to " + std::to_string(kMaxConcatInputs) + " inputs");
  }
  FERRY_ASSIGN_OR_RETURN(const Value* first, c.Tensor(0));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", 0), first->shape.size());
  if (!axis || *axis == 0) {
    return c.Fail("axis must be one of the axes after the batch axis of " + Dims(first->shape));
  }
  if (count == 1) {
    c.Define(0, *first);
    return OkStatus();
  }
  Op op;
  op.kind = OpKind::kConcat;
  op.axis = *axis;
  Shape shape = first->shape;
  shape[static_cast<size_t>(*axis)] = 0;
  for (int i = 0; i < count; ++i) {
    FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(i));
    Shape rest = x->shape;
    if (rest.size() == shape.size()) {
      rest[static_cast<size_t>(*axis)] = 0;
    }
    if (rest != shape) {
      return c.Fail("input " + std::to_string(i) + " " + Dims(x->shape) + " does not match " +
                    Dims(first->shape) + " on every axis but " + std::to_string(*axis));
    }
    op.inputs.push_back(x->tensor);
  }
  for (int i = 0; i < count; ++i) {
    shape[static_cast<size_t>(*axis)] += c.Input(i)->shape[static_cast<size_t>(*axis)];
  }
  c.Emit(op, shape);
  return OkStatus();
}

// A computed tensor cut along an axis after the batch axis: one slice per output.
Status Split(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", 0), x->shape.size());
  if (!axis || *axis == 0) {
    return c.Fail("axis must be one of the axes after the batch axis of " + Dims(x->shape));
  }
  std::vector<int64_t> split;
  if (c.opset() >= 13) {
    if (c.Input(1) != nullptr) {
      FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, c.Constant(1));
      if (!t->integer) {
        return c.Fail("split must be an integer constant");
      }
      split = t->ints;
    }
  } else {
    split = attrs.Ints("split", {});
  }
  int64_t length = x->shape[static_cast<size_t>(*axis)];
  FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                         SplitSizes(c, split, c.node().output_size(), length));
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); start += sizes[i], ++i) {
    if (c.node().output(static_cast<int>(i)).empty()) {
      continue;  // An output no node reads.
    }
    Op op;
    op.kind = OpKind::kSlice;
    op.inputs = {x->tensor};
    op.axis = *axis;
    op.start = start;
    op.end = start + sizes[i];
    Shape shape = x->shape;
    shape[static_cast<size_t>(*axis)] = sizes[i];
    c.Emit(op, shape, static_cast<int>(i));
  }
  return OkStatus();
}

}  // namespace ferry::onnx_import
