// Shape computations folded at import (folding.h): the folds that move elements (Concat,
// Slice, Gather, Expand, Unsqueeze, Squeeze, Reshape, Cast) and the tensor forms of Slice,
// Expand and Gather by a constant index.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/onnx/folding.h"

namespace ferry::onnx_import {
namespace {

// Normalised [start, end) with `step` along an axis of `dim` elements, as ONNX Slice clamps.
struct Range1 {
  int64_t start, step, count;
};
// REQUIRES: step is neither 0 nor INT64_MIN. No arithmetic here can overflow.
Range1 Clamp(int64_t start, int64_t end, int64_t step, int64_t dim) {
  if (dim == 0) {
    return {0, step, 0};
  }
  auto fix = [dim](int64_t v, int64_t lo, int64_t hi) {
    v = v < 0 ? (v < -dim ? lo : v + dim) : v;
    return std::clamp(v, lo, hi);
  };
  if (step > 0) {
    start = fix(start, 0, dim);
    end = fix(end, 0, dim);
    return {start, step, end > start ? (end - start - 1) / step + 1 : 0};
  }
  start = fix(start, 0, dim - 1);  // ONNX: [0, dim - 1] when stepping back.
  end = fix(end, -1, dim - 1);
  return {start, step, start > end ? (start - end - 1) / -step + 1 : 0};
}

// Appends elements [begin, end) of `from` (batch size marks kept) to *to, of the same type.
void AppendRange(const ConstTensor& from, size_t begin, size_t end, ConstTensor* to) {
  if (!from.integer) {
    to->floats.insert(to->floats.end(), from.floats.begin() + static_cast<std::ptrdiff_t>(begin),
                      from.floats.begin() + static_cast<std::ptrdiff_t>(end));
    return;
  }
  for (size_t k = begin; k < end; ++k) {
    AppendInt(from, k, to);
  }
}

// A Slice's starts, ends, axes and steps, each a constant integer vector of one length.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};
Result<SliceArgs> ReadSliceArgs(Converter& c, size_t rank) {
  SliceArgs args;
  std::vector<int64_t>* out[] = {&args.starts, &args.ends, &args.axes, &args.steps};
  for (int i = 1; i <= 4; ++i) {
    if (c.Input(i) == nullptr) {
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, c.Constant(i));
    if (!t->integer || t->dims.size() != 1) {
      return c.Fail("starts, ends, axes and steps must be constant integer vectors");
    }
    *out[i - 1] = t->ints;
  }
  size_t n = args.starts.size();
  if (args.axes.empty()) {
    for (size_t i = 0; i < n; ++i) {
      args.axes.push_back(static_cast<int64_t>(i));
    }
  }
  if (args.steps.empty()) {
    args.steps.assign(n, 1);
  }
  if (args.ends.size() != n || args.axes.size() != n || args.steps.size() != n) {
    return c.Fail("starts, ends, axes and steps differ in length");
  }
  std::vector<bool> seen(rank, false);
  for (int64_t& axis : args.axes) {
    std::optional<int64_t> a = NormalAxis(axis, rank);
    if (!a || seen[static_cast<size_t>(*a)]) {
      return c.Fail("axes must name distinct axes of the data, got " + Dims(args.axes));
    }
    seen[static_cast<size_t>(*a)] = true;
    axis = *a;
  }
  for (int64_t step : args.steps) {
    if (step == 0 || step == std::numeric_limits<int64_t>::min()) {
      return c.Fail("a step of 0 (or of -2^63) is not allowed");
    }
  }
  return args;
}

}  // namespace

Status Concat(Converter& c, Attributes& attrs) {
  std::vector<const ConstTensor*> in;
  for (int i = 0; i < c.node().input_size(); ++i) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, c.Folded(i));
    if (t->batch_broadcast || (!in.empty() && t->integer != in[0]->integer)) {
      return c.Fail("the inputs must be constants of one type, none batch-sized");
    }
    in.push_back(t);
  }
  if (in.empty() || in[0]->dims.empty()) {
    return c.Fail("needs inputs of rank 1 or more");
  }
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", 0), in[0]->dims.size());
  Shape dims = in[0]->dims;
  for (size_t k = 1; axis && k < in.size(); ++k) {
    Shape other = in[k]->dims;
    if (other.size() != dims.size()) {
      axis.reset();
      break;
    }
    dims[static_cast<size_t>(*axis)] += other[static_cast<size_t>(*axis)];
    other[static_cast<size_t>(*axis)] = dims[static_cast<size_t>(*axis)];
    axis = other == dims ? axis : std::nullopt;
  }
  if (!axis) {
    return c.Fail("the inputs' shapes do not concatenate along axis " +
                  std::to_string(attrs.Int("axis", 0)));
  }
  if (!CountOf(dims)) {
    return TooLarge(c, dims);
  }
  ConstTensor out;
  out.dims = dims;
  out.integer = in[0]->integer;
  int64_t outer =
      Product(dims, 0) / std::max<int64_t>(Product(dims, static_cast<size_t>(*axis)), 1);
  for (int64_t o = 0; o < outer; ++o) {
    for (const ConstTensor* t : in) {
      int64_t block = Product(t->dims, static_cast<size_t>(*axis));
      auto from = static_cast<size_t>(o * block), to = from + static_cast<size_t>(block);
      AppendRange(*t, from, to, &out);
    }
  }
  return c.DefineConstant(0, std::move(out));
}

Status FoldSlice(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* data, c.Folded(0));
  size_t rank = data->dims.size();
  FERRY_ASSIGN_OR_RETURN(SliceArgs args, ReadSliceArgs(c, rank));
  std::vector<Range1> ranges;
  Shape dims = data->dims;
  for (size_t a = 0; a < rank; ++a) {
    ranges.push_back({0, 1, dims[a]});
  }
  for (size_t i = 0; i < args.axes.size(); ++i) {
    auto a = static_cast<size_t>(args.axes[i]);
    if (a == 0 && data->batch_broadcast) {
      return c.Fail("slicing the batch axis of a batch-sized constant is not supported");
    }
    ranges[a] = Clamp(args.starts[i], args.ends[i], args.steps[i], dims[a]);
    dims[a] = ranges[a].count;
  }
  std::optional<int64_t> count = CountOf(dims);
  if (!count) {
    return TooLarge(c, dims);
  }
  ConstTensor out = *data;
  out.dims = dims;
  out.ints.clear();
  out.floats.clear();
  out.batch_size.clear();
  std::vector<int64_t> coord(rank, 0);
  for (int64_t n = 0; n < *count; ++n) {
    int64_t from = 0;
    for (size_t a = 0; a < rank; ++a) {
      from = from * data->dims[a] + ranges[a].start + coord[a] * ranges[a].step;
    }
    if (out.integer) {
      AppendInt(*data, static_cast<size_t>(from), &out);
    } else {
      out.floats.push_back(data->floats[static_cast<size_t>(from)]);
    }
    for (size_t a = rank; a-- > 0 && ++coord[a] == dims[a];) {
      coord[a] = 0;
    }
  }
  return c.DefineConstant(0, std::move(out));
}

Status SliceOp(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  FERRY_ASSIGN_OR_RETURN(SliceArgs args, ReadSliceArgs(c, x->shape.size()));
  Value current = *x;
  for (size_t i = 0; i < args.axes.size(); ++i) {
    auto a = static_cast<size_t>(args.axes[i]);
    if (a == 0) {  // Only the whole batch axis: x[:, ...] exports it as [0, 2^63 - 1).
      if (args.starts[i] != 0 || args.steps[i] != 1 || args.ends[i] < (int64_t{1} << 31)) {
        return c.Fail("the batch axis can only be kept whole");
      }
      continue;
    }
    Range1 r = Clamp(args.starts[i], args.ends[i], args.steps[i], current.shape[a]);
    if (r.count == current.shape[a] && r.step == 1) {
      continue;  // The whole axis.
    }
    if (r.step != 1 || r.count < 1) {
      return c.Fail("a slice of a computed tensor needs step 1 and at least one element, axis " +
                    std::to_string(a) + " of " + Dims(current.shape));
    }
    Op op;
    op.kind = OpKind::kSlice;
    op.inputs = {current.tensor};
    op.axis = static_cast<int64_t>(a);
    op.start = r.start;
    op.end = r.start + r.count;
    Shape shape = current.shape;
    shape[a] = r.count;
    Op& emitted = c.Emit(op, shape);
    current = Value{emitted.output, shape, nullptr};
  }
  c.Define(0, current);
  return OkStatus();
}

Status Expand(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* shape, c.Folded(1));
  if (!shape->integer || shape->dims.size() != 1 || shape->ints.size() > x->shape.size()) {
    return c.Fail("the shape must be a constant integer vector of at most the input's rank");
  }
  size_t offset = x->shape.size() - shape->ints.size();
  for (size_t i = 0; i < shape->ints.size(); ++i) {
    int64_t want = shape->ints[i], have = x->shape[offset + i];
    bool marked = IsBatchSize(*shape, i);
    bool kept = offset + i == 0 ? marked || want == 1 : !marked && (want == 1 || want == have);
    if (!kept) {
      return c.Fail("expanding a computed tensor " + Dims(x->shape) +
                    " beyond its shape is not supported");
    }
  }
  c.Define(0, *x);  // Every axis kept: the data as it is.
  return OkStatus();
}

Status FoldExpand(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* x, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* shape, c.Folded(1));
  if (!shape->integer || shape->dims.size() != 1) {
    return c.Fail("the shape must be a constant integer vector");
  }
  Shape target = shape->ints;
  bool batch = !target.empty() && IsBatchSize(*shape, 0) && target.size() >= x->dims.size();
  for (size_t i = batch ? 1 : 0; i < target.size(); ++i) {
    if (IsBatchSize(*shape, i)) {
      return c.Fail("the batch size may only be the first value of an Expand's shape");
    }
  }
  if (batch) {
    target[0] = 1;  // Expanded to every row: kept as one row that broadcasts.
  }
  std::optional<Shape> dims = BroadcastDims({x->dims, target});
  if (HasBatchSize(*x) || !dims ||
      std::any_of(target.begin(), target.end(), [](int64_t d) { return d < 0; })) {
    return c.Fail("cannot expand " + Dims(x->dims) + " to the shape given");
  }
  if (!CountOf(*dims)) {
    return TooLarge(c, *dims);
  }
  ConstTensor out;
  FERRY_ASSIGN_OR_RETURN(out.batch_broadcast, BatchBroadcast(c, {x}, dims->size()));
  out.batch_broadcast = out.batch_broadcast || batch;
  out.dims = *dims;
  out.integer = x->integer;
  ForEachBroadcast(*dims, {x->dims}, [&](const std::vector<int64_t>& at) {
    if (out.integer) {
      out.ints.push_back(x->ints[static_cast<size_t>(at[0])]);
    } else {
      out.floats.push_back(x->floats[static_cast<size_t>(at[0])]);
    }
  });
  return c.DefineConstant(0, std::move(out));
}

Status FoldGather(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* data, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* indices, c.Folded(1));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", 0), data->dims.size());
  if (!axis || !indices->integer || HasBatchSize(*indices)) {
    return c.Fail("needs an axis of the data and constant integer indices");
  }
  auto a = static_cast<size_t>(*axis);
  if (data->batch_broadcast && (a == 0 || indices->batch_broadcast)) {
    return c.Fail("gathering along the batch axis of a batch-sized constant is not supported");
  }
  Shape dims(data->dims.begin(), data->dims.begin() + *axis);
  dims.insert(dims.end(), indices->dims.begin(), indices->dims.end());
  dims.insert(dims.end(), data->dims.begin() + *axis + 1, data->dims.end());
  if (!CountOf(dims)) {
    return TooLarge(c, dims);
  }
  int64_t n = data->dims[a], inner = Product(data->dims, a + 1);
  int64_t outer = Product(data->dims, 0) / std::max<int64_t>(n * inner, 1);
  ConstTensor out;
  out.dims = dims;
  out.integer = data->integer;
  out.batch_broadcast = data->batch_broadcast || (a == 0 && indices->batch_broadcast);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t index : indices->ints) {
      if (index < -n || index >= n) {
        return c.Fail("index " + std::to_string(index) + " is outside an axis of " +
                      std::to_string(n));
      }
      auto from = static_cast<size_t>((o * n + (index < 0 ? index + n : index)) * inner);
      auto to = from + static_cast<size_t>(inner);
      AppendRange(*data, from, to, &out);
    }
  }
  return c.DefineConstant(0, std::move(out));
}

// x[:, i] and x[:, i:j] written as a Gather: a slice, then a reshape dropping the axis for a
// scalar index.
Status GatherOfTensor(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* indices, c.Constant(1));
  std::optional<int64_t> axis = NormalAxis(attrs.Int("axis", 0), x->shape.size());
  if (!axis || *axis == 0 || !indices->integer || indices->dims.size() > 1 ||
      indices->ints.empty()) {
    return c.Fail(
        "gathering from a computed tensor needs an axis after the batch axis and a "
        "constant index or vector of indices");
  }
  auto a = static_cast<size_t>(*axis);
  int64_t n = x->shape[a];
  std::vector<int64_t> at = indices->ints;
  for (size_t k = 0; k < at.size(); ++k) {
    at[k] = at[k] < 0 && at[k] >= -n ? at[k] + n : at[k];
    if (at[k] < 0 || at[k] >= n || (k > 0 && at[k] != at[k - 1] + 1)) {
      return c.Fail("the indices must be consecutive and inside an axis of " + std::to_string(n) +
                    ", got " + Dims(indices->ints));
    }
  }
  Shape shape = x->shape;
  shape[a] = static_cast<int64_t>(at.size());
  Op slice;
  slice.kind = OpKind::kSlice;
  slice.inputs = {x->tensor};
  slice.axis = *axis;
  slice.start = at[0];
  slice.end = at.back() + 1;
  if (!indices->dims.empty()) {
    c.Emit(slice, shape);
    return OkStatus();
  }
  shape.erase(shape.begin() + *axis);
  if (shape.size() < 2) {
    return c.Fail("the result " + Dims(shape) + " keeps no axis after the batch axis");
  }
  Shape sliced_shape = x->shape;
  sliced_shape[a] = 1;
  std::string sliced = c.Emit(slice, sliced_shape).output;  // Output 0 redefined below.
  Op reshape;
  reshape.kind = OpKind::kReshape;
  reshape.inputs = {sliced};
  reshape.shape = Shape(shape.begin() + 1, shape.end());
  c.Emit(reshape, shape);
  return OkStatus();
}

// The axes of Unsqueeze / Squeeze: an input from version 13, an attribute before.
Result<std::vector<int64_t>> AxesOf(Converter& c, Attributes& attrs) {
  if (c.opset() < 13) {
    return attrs.Ints("axes", {});
  }
  if (c.Input(1) == nullptr) {
    return std::vector<int64_t>{};
  }
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* axes, c.Constant(1));
  if (!axes->integer || axes->dims.size() > 1) {
    return c.Fail("axes must be a constant integer vector");
  }
  return axes->ints;
}

// A constant with new dims and the same elements.
Status Redimension(Converter& c, const ConstTensor& x, Shape dims) {
  ConstTensor out = x;
  out.dims = std::move(dims);
  return c.DefineConstant(0, std::move(out));
}

Status FoldUnsqueeze(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* x, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(c, attrs));
  size_t rank = x->dims.size() + axes.size();
  std::vector<bool> marked(rank, false);
  for (int64_t axis : axes) {
    std::optional<int64_t> a = NormalAxis(axis, rank);
    if (!a || marked[static_cast<size_t>(*a)] || (*a == 0 && x->batch_broadcast)) {
      return c.Fail("axes must name distinct axes of the result, got " + Dims(axes));
    }
    marked[static_cast<size_t>(*a)] = true;
  }
  Shape dims;
  for (size_t i = 0, from = 0; i < rank; ++i) {
    dims.push_back(marked[i] ? 1 : x->dims[from++]);
  }
  return Redimension(c, *x, dims);
}

Status FoldSqueeze(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* x, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(c, attrs));
  std::vector<bool> marked(x->dims.size(), axes.empty());
  for (int64_t axis : axes) {
    std::optional<int64_t> a = NormalAxis(axis, x->dims.size());
    if (!a || x->dims[static_cast<size_t>(*a)] != 1) {
      return c.Fail("axes must name axes of size 1, got " + Dims(axes));
    }
    marked[static_cast<size_t>(*a)] = true;
  }
  Shape dims;
  for (size_t i = 0; i < x->dims.size(); ++i) {
    if (!marked[i] || x->dims[i] != 1) {
      dims.push_back(x->dims[i]);
    } else if (i == 0 && x->batch_broadcast) {
      return c.Fail("squeezing the batch axis of a batch-sized constant");
    }
  }
  return Redimension(c, *x, dims);
}

Status FoldReshape(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* x, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* target, c.Constant(1));
  bool allow_zero = attrs.Int("allowzero", 0) != 0;
  if (x->batch_broadcast || !target->integer || target->dims.size() != 1) {
    return c.Fail("needs a constant integer shape (and data that is not batch-sized)");
  }
  Shape dims = target->ints;
  std::optional<size_t> infer;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allow_zero) {
      dims[i] = i < x->dims.size() ? x->dims[i] : -2;
    }
    if (dims[i] == -1 && !infer) {
      infer = i;
    } else if (dims[i] < 0 || (dims[i] > 0 && known > kMaxFoldedElements / dims[i])) {
      return c.Fail("cannot reshape " + Dims(x->dims) + " to " + Dims(target->ints));
    } else {
      known *= dims[i];
    }
  }
  int64_t total = x->elements();
  if (infer) {
    dims[*infer] = known > 0 && total % known == 0 ? total / known : -1;
  }
  if ((infer && dims[*infer] < 0) || (!infer && known != total)) {
    return c.Fail("cannot reshape " + Dims(x->dims) + " to " + Dims(target->ints));
  }
  return Redimension(c, *x, dims);
}

// To an integer type (exactly, or refused where it would wrap), BOOL, FLOAT or DOUBLE.
Status FoldCast(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* x, c.Folded(0));
  int64_t to = attrs.Int("to", 0);
  ConstTensor out = *x;
  if (to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE) {
    if (HasBatchSize(*x)) {
      return c.Fail("the batch size cast to a float is not folded");
    }
    if (x->integer) {
      out.integer = false;
      out.ints.clear();
      for (int64_t v : x->ints) {
        out.floats.push_back(static_cast<float>(v));
      }
    }
    return c.DefineConstant(0, std::move(out));
  }
  std::optional<std::pair<double, double>> range;
  switch (to) {
    case onnx::TensorProto::BOOL:
      range = {0, 1};
      break;
    case onnx::TensorProto::INT64:
      range = {-0x1p63, 0x1p63};
      break;
    case onnx::TensorProto::INT32:
      range = {-0x1p31, 0x1p31 - 1};
      break;
    default:
      return c.Fail("a constant is folded to FLOAT, DOUBLE, INT64, INT32 or BOOL only");
  }
  if (x->integer && to == onnx::TensorProto::INT64) {
    return c.DefineConstant(0, std::move(out));  // As it is, batch size marks included.
  }
  if (HasBatchSize(*x)) {
    return c.Fail("the batch size cast to a type other than INT64 is not folded");
  }
  out.integer = true;
  out.ints.clear();
  out.floats.clear();
  for (int64_t i = 0; i < x->elements(); ++i) {
    auto k = static_cast<size_t>(i);
    if (to == onnx::TensorProto::BOOL) {
      out.ints.push_back(x->integer ? x->ints[k] != 0 : x->floats[k] != 0.0f);
      continue;
    }
    if (x->integer && to == onnx::TensorProto::INT64) {
      out.ints.push_back(x->ints[k]);
      continue;
    }
    double v = x->integer ? static_cast<double>(x->ints[k]) : std::trunc(x->floats[k]);
    if (!(v >= range->first && v < range->second + 1)) {
      return c.Fail("value " + std::to_string(v) + " does not fit the type cast to");
    }
    out.ints.push_back(static_cast<int64_t>(v));
  }
  return c.DefineConstant(0, std::move(out));
}

}  // namespace ferry::onnx_import
