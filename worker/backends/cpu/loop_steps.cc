#include "worker/backends/cpu/loop_steps.h"

#include <algorithm>

#include "worker/backends/cpu/imported_ops.h"
#include "worker/backends/cpu/ops.h"
#include "worker/backends/cpu/tensor_ops.h"

namespace ferry::cpu {

std::function<Status()> LoopStep(const Op& op, const LoopOperands& operands) {
  const std::vector<float>* x = operands.x;
  std::vector<float>* y = operands.y;
  const Shape& xs = operands.x_shape;
  const Shape& ys = operands.y_shape;
  auto done = [](auto run) -> std::function<Status()> {
    return [run] {
      run();
      return OkStatus();
    };
  };
  switch (op.kind) {
    case OpKind::kRelu:
      return done([x, y] { Relu(*x, *y); });
    case OpKind::kGelu:
      return done([x, y] { Gelu(*x, *y); });
    case OpKind::kTanh:
      return done([x, y] { Tanh(*x, *y); });
    case OpKind::kSigmoid:
      return done([x, y] { Sigmoid(*x, *y); });
    case OpKind::kClip: {
      auto lo = static_cast<float>(op.min), hi = static_cast<float>(op.max);
      return done([x, lo, hi, y] { Clip(*x, lo, hi, *y); });
    }
    case OpKind::kSlice: {
      int64_t axis = op.axis < 0 ? op.axis + static_cast<int64_t>(xs.size()) : op.axis;
      return done([x, xs, axis, start = op.start, end = op.end, y] {
        Slice(*x, xs, axis, start, end, *y);
      });
    }
    case OpKind::kSqrt:
    case OpKind::kExp:
    case OpKind::kLog:
      return done([kind = op.kind, x, y] { Elementwise(kind, *x, *y); });
    case OpKind::kGather: {
      std::span<const float> table = operands.weight;
      int64_t width = ys.back();
      int64_t rows = static_cast<int64_t>(table.size()) / width;
      return [x, table, rows, width, y] { return Gather(*x, table, rows, width, *y); };
    }
    case OpKind::kReduceMean:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
      return done([kind = op.kind, x, xs, axis = op.axis, y] { Reduce(kind, *x, xs, axis, *y); });
    case OpKind::kHardSigmoid:
      return done([op, x, y] { Piecewise(op, *x, *y); });
    case OpKind::kArgMax:
      return done(
          [x, xs, axis = op.axis, last = op.last_index, y] { ArgMax(*x, xs, axis, last, *y); });
    case OpKind::kFlatten:
    case OpKind::kReshape:
      return done([x, y] { std::copy(x->begin(), x->end(), y->begin()); });
    case OpKind::kDense:
    case OpKind::kConv2d:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kMatMul:
    case OpKind::kSoftmax:
    case OpKind::kMaxPool2d:
    case OpKind::kGlobalAvgPool:
    case OpKind::kLayerNorm:
    case OpKind::kTranspose:
    case OpKind::kLeakyRelu:
    case OpKind::kHardSwish:
    case OpKind::kAvgPool2d:
    case OpKind::kLogSoftmax:
    case OpKind::kConcat:
      break;  // oneDNN primitives (fast_program.cc).
  }
  return {};
}

}  // namespace ferry::cpu
