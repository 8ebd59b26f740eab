// Shape computations folded at import (folding.h): the constant evaluators and the ops that
// read shapes.
#include "model/onnx/folding.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>

#include "model/onnx/op_helpers.h"

namespace ferry::onnx_import {

// The element count of `dims`, or nullopt when a dim is negative or the count exceeds
// kMaxFoldedElements (checked before anything is allocated).
std::optional<int64_t> CountOf(const Shape& dims) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && count > kMaxFoldedElements / d)) {
      return std::nullopt;
    }
    count *= d;
  }
  return count;
}

Error TooLarge(Converter& c, const Shape& dims) {
  return c.Fail("the folded result " + Dims(dims) + " is negative or has more than 2^24 elements");
}

// The numpy broadcast of `shapes`, or nullopt.
std::optional<Shape> BroadcastDims(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) {
    rank = std::max(rank, s.size());
  }
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] != o && s[i] != 1 && o != 1) {
        return std::nullopt;
      }
      o = o == 1 ? s[i] : o;
    }
  }
  return out;
}

// Whether a result of rank `rank` is batch_broadcast: some operand is, and each such operand
// keeps its batch axis at axis 0 of the result.
Result<bool> BatchBroadcast(Converter& c, const std::vector<const ConstTensor*>& in, size_t rank) {
  bool any = false;
  for (const ConstTensor* t : in) {
    if (t->batch_broadcast && t->dims.size() != rank) {
      return c.Fail("a batch-sized constant would lose its batch axis");
    }
    any = any || t->batch_broadcast;
  }
  return any;
}

namespace {

// The elementwise fold of `in` (numpy broadcasting): `f(values, index per operand)` gives each
// element; the result is integer when `integer`.
template <typename F>
Status FoldElementwise(Converter& c, const std::vector<const ConstTensor*>& in, bool integer, F f) {
  std::vector<Shape> shapes;
  for (const ConstTensor* t : in) {
    shapes.push_back(t->dims);
  }
  std::optional<Shape> dims = BroadcastDims(shapes);
  if (!dims) {
    return c.Fail("the constant operands do not broadcast");
  }
  if (!CountOf(*dims)) {
    return TooLarge(c, *dims);
  }
  FERRY_ASSIGN_OR_RETURN(bool batch, BatchBroadcast(c, in, dims->size()));
  ConstTensor out;
  out.dims = *dims;
  out.integer = integer;
  out.batch_broadcast = batch;
  Status status = OkStatus();
  ForEachBroadcast(*dims, shapes, [&](const std::vector<int64_t>& at) {
    if (!status.ok()) {
      return;
    }
    Result<double> v = f(at);
    if (!v.ok()) {
      status = v.error();
    } else if (integer) {
      out.ints.push_back(static_cast<int64_t>(*v));
    } else {
      out.floats.push_back(static_cast<float>(*v));
    }
  });
  FERRY_RETURN_IF_ERROR(status);
  return c.DefineConstant(0, std::move(out));
}

// Folded integer constants hold integers that fit a double exactly only to 2^53: integer
// arithmetic is done here in int64 with overflow checks instead.
Status FoldArithmetic(Converter& c, OpKind kind) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* a, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* b, c.Folded(1));
  if (HasBatchSize(*a) || HasBatchSize(*b)) {
    return c.Fail("arithmetic on the batch size is not folded (it is known only at run time)");
  }
  if (a->integer != b->integer) {
    return c.Fail("the operands' types differ");
  }
  if (!a->integer) {
    return FoldElementwise(c, {a, b}, false, [&](const std::vector<int64_t>& at) -> Result<double> {
      double x = a->floats[static_cast<size_t>(at[0])], y = b->floats[static_cast<size_t>(at[1])];
      switch (kind) {
        case OpKind::kSub:
          return static_cast<double>(static_cast<float>(x) - static_cast<float>(y));
        case OpKind::kMul:
          return static_cast<double>(static_cast<float>(x) * static_cast<float>(y));
        case OpKind::kDiv:
          return static_cast<double>(static_cast<float>(x) / static_cast<float>(y));
        default:
          return static_cast<double>(static_cast<float>(x) + static_cast<float>(y));
      }
    });
  }
  // Integers: computed exactly, then stored; a result past 2^53 is refused with the rest.
  std::vector<Shape> shapes = {a->dims, b->dims};
  std::optional<Shape> dims = BroadcastDims(shapes);
  if (!dims) {
    return c.Fail("the constant operands do not broadcast");
  }
  if (!CountOf(*dims)) {
    return TooLarge(c, *dims);
  }
  FERRY_ASSIGN_OR_RETURN(bool batch, BatchBroadcast(c, {a, b}, dims->size()));
  ConstTensor out;
  out.dims = *dims;
  out.integer = true;
  out.batch_broadcast = batch;
  bool bad = false;
  ForEachBroadcast(*dims, shapes, [&](const std::vector<int64_t>& at) {
    int64_t x = a->ints[static_cast<size_t>(at[0])], y = b->ints[static_cast<size_t>(at[1])];
    int64_t r = 0;
    switch (kind) {
      case OpKind::kSub:
        bad = bad || __builtin_sub_overflow(x, y, &r);
        break;
      case OpKind::kMul:
        bad = bad || __builtin_mul_overflow(x, y, &r);
        break;
      case OpKind::kDiv:
        bad = bad || y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1);
        r = bad ? 0 : x / y;  // Truncates toward zero, as ONNX Runtime's integer Div.
        break;
      default:
        bad = bad || __builtin_add_overflow(x, y, &r);
        break;
    }
    out.ints.push_back(r);
  });
  if (bad) {
    return c.Fail("integer arithmetic overflows or divides by zero");
  }
  return c.DefineConstant(0, std::move(out));
}

}  // namespace

Status FoldAdd(Converter& c, Attributes&) { return FoldArithmetic(c, OpKind::kAdd); }
Status FoldSub(Converter& c, Attributes&) { return FoldArithmetic(c, OpKind::kSub); }
Status FoldMul(Converter& c, Attributes&) { return FoldArithmetic(c, OpKind::kMul); }
Status FoldDiv(Converter& c, Attributes&) { return FoldArithmetic(c, OpKind::kDiv); }

Status FoldPow(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* a, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* b, c.Folded(1));
  if (HasBatchSize(*a) || HasBatchSize(*b)) {
    return c.Fail("arithmetic on the batch size is not folded (it is known only at run time)");
  }
  auto value = [](const ConstTensor* t, int64_t i) {
    auto k = static_cast<size_t>(i);
    return t->integer ? static_cast<double>(t->ints[k]) : static_cast<double>(t->floats[k]);
  };
  return FoldElementwise(c, {a, b}, a->integer,
                         [&](const std::vector<int64_t>& at) -> Result<double> {
                           double r = std::pow(value(a, at[0]), value(b, at[1]));
                           if (a->integer && !(std::abs(r) < 0x1p53)) {
                             return c.Fail("an integer power past 2^53 is not folded");
                           }
                           return r;
                         });
}

Status ShapeOf(Converter& c, Attributes& attrs) {
  const Value* x = c.Input(0);
  if (x == nullptr) {
    return c.Fail("needs an input");
  }
  ConstTensor dims;  // Axis 0 of a batched tensor is the batch size.
  dims.integer = true;
  dims.ints = x->shape;
  if (!dims.ints.empty() && (x->constant == nullptr || x->constant->batch_broadcast)) {
    dims.ints[0] = 0;
    dims.batch_size.assign(dims.ints.size(), false);
    dims.batch_size[0] = true;
  }
  auto rank = static_cast<int64_t>(dims.ints.size());
  auto bound = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  int64_t start = bound(attrs.Int("start", 0)), end = bound(attrs.Int("end", rank));
  ConstTensor out;
  out.integer = true;
  for (int64_t i = start; i < end; ++i) {
    AppendInt(dims, static_cast<size_t>(i), &out);
  }
  out.dims = {static_cast<int64_t>(out.ints.size())};
  return c.DefineConstant(0, std::move(out));
}

Status ConstantOfShape(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* shape, c.Folded(0));
  if (!shape->integer || shape->dims.size() != 1 || shape->batch_broadcast) {
    return c.Fail("the shape must be a constant integer vector");
  }
  ConstTensor value;
  value.floats = {0.0f};
  if (const onnx::TensorProto* t = attrs.Tensor("value")) {
    uint64_t no_external = 0;
    Result<ConstTensor> decoded = DecodeTensor(*t, "", &no_external);
    if (!decoded.ok() || decoded->elements() != 1) {
      return c.Fail("value must be a tensor of one element");
    }
    value = std::move(*decoded);
  }
  ConstTensor out;
  out.dims = shape->ints;
  for (size_t i = 1; i < shape->ints.size(); ++i) {
    if (IsBatchSize(*shape, i)) {
      return c.Fail("the batch size may only be the first dimension");
    }
  }
  if (IsBatchSize(*shape, 0)) {
    out.dims[0] = 1;  // The same values in every row of the batch.
    out.batch_broadcast = true;
  }
  std::optional<int64_t> count = CountOf(out.dims);
  if (!count) {
    return TooLarge(c, shape->ints);
  }
  out.integer = value.integer;
  if (value.integer) {
    out.ints.assign(static_cast<size_t>(*count), value.ints[0]);
  } else {
    out.floats.assign(static_cast<size_t>(*count), value.floats[0]);
  }
  return c.DefineConstant(0, std::move(out));
}

Status Range(Converter& c, Attributes&) {
  const ConstTensor* v[3];
  for (int i = 0; i < 3; ++i) {
    FERRY_ASSIGN_OR_RETURN(v[i], c.Constant(i));
    if (v[i]->elements() != 1 || v[i]->integer != v[0]->integer) {
      return c.Fail("start, limit and delta must be scalars of one type");
    }
  }
  auto at = [&](int i) {
    return v[i]->integer ? static_cast<double>(v[i]->ints[0]) : v[i]->floats[0];
  };
  double start = at(0), limit = at(1), delta = at(2);
  double n = std::ceil((limit - start) / delta);
  if (v[0]->integer && v[2]->ints[0] != 0) {
    // Counted exactly: doubles near 2^63 are 1,024 apart, and would miscount.
    __int128 span = static_cast<__int128>(v[1]->ints[0]) - v[0]->ints[0];
    __int128 step = v[2]->ints[0];
    __int128 steps = span / step + ((span % step != 0 && (span > 0) == (step > 0)) ? 1 : 0);
    n = static_cast<double>(steps);
  }
  if (delta == 0 || !(n < static_cast<double>(kMaxFoldedElements))) {
    return c.Fail("the range is empty of steps or has more than 2^24 elements");
  }
  ConstTensor out;
  out.integer = v[0]->integer;
  auto count = static_cast<int64_t>(std::max(n, 0.0));
  out.dims = {count};
  for (int64_t i = 0; i < count; ++i) {
    if (out.integer) {  // Every value lies in [start, limit): no overflow.
      out.ints.push_back(v[0]->ints[0] + i * v[2]->ints[0]);
    } else {
      out.floats.push_back(static_cast<float>(start + static_cast<double>(i) * delta));
    }
  }
  return c.DefineConstant(0, std::move(out));
}

Status Equal(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* a, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* b, c.Folded(1));
  if (a->integer != b->integer) {
    return c.Fail("the operands' types differ");
  }
  return FoldElementwise(c, {a, b}, true, [&](const std::vector<int64_t>& at) -> Result<double> {
    auto i = static_cast<size_t>(at[0]), j = static_cast<size_t>(at[1]);
    if (!a->integer) {
      return a->floats[i] == b->floats[j] ? 1.0 : 0.0;
    }
    int64_t x = a->ints[i], y = b->ints[j];
    bool batch_x = IsBatchSize(*a, i), batch_y = IsBatchSize(*b, j);
    if (batch_x != batch_y) {  // The batch size is positive: never equal to a number <= 0.
      int64_t other = batch_x ? y : x;
      if (other > 0) {
        return c.Fail("compares the batch size with " + std::to_string(other) +
                      ", which only the running batch decides");
      }
      return 0.0;
    }
    return batch_x || x == y ? 1.0 : 0.0;
  });
}

Status Where(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* cond, c.Folded(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* x, c.Folded(1));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* y, c.Folded(2));
  if (!cond->integer || x->integer != y->integer) {
    return c.Fail("needs a BOOL condition and two values of one type");
  }
  // Integers pass through as they are (the batch size mark included); a double would round them.
  std::vector<Shape> shapes = {cond->dims, x->dims, y->dims};
  std::optional<Shape> dims = BroadcastDims(shapes);
  if (!dims) {
    return c.Fail("the operands do not broadcast");
  }
  if (!CountOf(*dims)) {
    return TooLarge(c, *dims);
  }
  ConstTensor out;
  FERRY_ASSIGN_OR_RETURN(out.batch_broadcast, BatchBroadcast(c, {cond, x, y}, dims->size()));
  out.dims = *dims;
  out.integer = x->integer;
  ForEachBroadcast(*dims, shapes, [&](const std::vector<int64_t>& at) {
    const ConstTensor& from = cond->ints[static_cast<size_t>(at[0])] != 0 ? *x : *y;
    auto i = static_cast<size_t>(at[&from == x ? 1 : 2]);
    if (out.integer) {
      AppendInt(from, i, &out);
    } else {
      out.floats.push_back(from.floats[i]);
    }
  });
  return c.DefineConstant(0, std::move(out));
}

}  // namespace ferry::onnx_import
