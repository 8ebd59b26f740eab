#include "model/shape_inference.h"

#include <algorithm>

namespace ferry {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

class Inference {
 public:
  Inference(const Manifest& m, const ShapeVariant& v, int64_t batch, const WeightLookup& w)
      : m_(m), v_(v), batch_(batch), weights_(w) {}

  Result<std::map<std::string, Shape>> Run() {
    for (const TensorSpec& input : m_.inputs) {
      if (!IsFloat(input.dtype) && input.dtype != DType::kF64 && !IsInteger(input.dtype)) {
        return Fail("input '" + input.name + "' is " + std::string(SafetensorsName(input.dtype)) +
                    "; program inputs are BOOL, integers, FP16, BF16, FP32 or FP64 (converted "
                    "to FP32)");
      }
      Shape shape = Concrete(v_.inputs.at(input.name));
      if (!NumElements(shape)) {
        return Fail("input '" + input.name + "' " + ShapeToString(shape) +
                    " has more than 2^40 elements");
      }
      shapes_[input.name] = std::move(shape);
    }
    for (op_index_ = 0; op_index_ < m_.program.size(); ++op_index_) {
      const Op& op = m_.program[op_index_];
      FERRY_ASSIGN_OR_RETURN(Shape out, InferOp(op));
      if (!NumElements(out)) {
        return OpFail(op, op.output, "has more than 2^40 elements");
      }
      shapes_[op.output] = std::move(out);
    }
    for (const TensorSpec& output : m_.outputs) {
      if (!IsFloat(output.dtype) && output.dtype != DType::kF64 && !IsInteger(output.dtype)) {
        return Fail("output '" + output.name + "' is " +
                    std::string(SafetensorsName(output.dtype)) +
                    "; program outputs are BOOL, integers, FP16, BF16, FP32 or FP64 (converted "
                    "from FP32)");
      }
      Shape expected = Concrete(v_.outputs.at(output.name));
      const Shape& got = shapes_.at(output.name);
      if (got != expected) {
        return Fail("output '" + output.name + "' is declared " + ShapeToString(expected) +
                    " but the program produces " + ShapeToString(got));
      }
    }
    return shapes_;
  }

 private:
  Shape Concrete(const Shape& manifest_shape) const {
    Shape out = manifest_shape;
    for (int64_t& d : out) {
      if (d == kBatchDim) {
        d = batch_;
      }
    }
    return out;
  }

  std::string Where() const {
    return "model '" + m_.name + "', variant '" + v_.name + "', batch " + std::to_string(batch_) +
           ": ";
  }
  Error Fail(const std::string& message) const { return InvalidArgument(Where() + message); }
  Error OpFail(const Op& op, const std::string& tensor, const std::string& message) const {
    return InvalidArgument(Where() + "op " + std::to_string(op_index_) + " (" +
                           std::string(OpKindName(op.kind)) + ") tensor '" + tensor +
                           "': " + message);
  }

  Result<WeightSpec> Weight(const Op& op, const std::string& name, const Shape& expected) {
    std::optional<WeightSpec> spec = weights_(name);
    if (!spec) {
      return OpFail(op, name, "no such weight in weights.safetensors");
    }
    if (!IsFloat(spec->dtype)) {
      return OpFail(
          op, name,
          "weight dtype " + std::string(SafetensorsName(spec->dtype)) + " is not F32, F16 or BF16");
    }
    for (int64_t d : spec->shape) {
      if (d == 0) {
        return OpFail(op, name,
                      "weight shape " + ShapeToString(spec->shape) + " has a zero dimension");
      }
    }
    if (spec->shape != expected) {
      return OpFail(
          op, name,
          "weight shape " + ShapeToString(spec->shape) + ", expected " + ShapeToString(expected));
    }
    return *spec;
  }

  Result<Shape> InferOp(const Op& op) {
    const Shape& x = shapes_.at(op.inputs[0]);
    const std::string& xn = op.inputs[0];
    switch (op.kind) {
      case OpKind::kRelu:
      case OpKind::kGelu:
      case OpKind::kTanh:
      case OpKind::kSigmoid:
      case OpKind::kClip:
      case OpKind::kSqrt:
      case OpKind::kExp:
      case OpKind::kLog:
      case OpKind::kLeakyRelu:
      case OpKind::kHardSigmoid:
      case OpKind::kHardSwish:
        return x;
      case OpKind::kConcat:
        return Concat(op, x);
      case OpKind::kSlice:
        return Slice(op, x);
      case OpKind::kSoftmax:
      case OpKind::kLogSoftmax: {
        int64_t rank = static_cast<int64_t>(x.size());
        if (op.axis < -rank || op.axis >= rank) {
          return OpFail(
              op, xn,
              "axis " + std::to_string(op.axis) + " is out of range for " + ShapeToString(x));
        }
        return x;
      }
      case OpKind::kAdd:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv:
        return Binary(op, x);
      case OpKind::kTranspose:
        return Transpose(op, x);
      case OpKind::kMatMul:
        return MatMul(op, x);
      case OpKind::kDense:
        return Dense(op, x);
      case OpKind::kLayerNorm:
        return LayerNorm(op, x);
      case OpKind::kConv2d:
        return Conv2d(op, x);
      case OpKind::kMaxPool2d:
      case OpKind::kAvgPool2d:
        if (x.size() != 4) {
          return OpFail(
              op, xn,
              std::string(OpKindName(op.kind)) + " needs [N, C, H, W], got " + ShapeToString(x));
        }
        return Window(op, x, x[1], op.kernel);
      case OpKind::kGlobalAvgPool:
        if (x.size() != 4) {
          return OpFail(op, xn, "global_avgpool needs [N, C, H, W], got " + ShapeToString(x));
        }
        return Shape{x[0], x[1]};
      case OpKind::kGather:
        return Gather(op, x);
      case OpKind::kReduceMean:
      case OpKind::kReduceSum:
      case OpKind::kReduceMax:
      case OpKind::kArgMax:
        return Reduce(op, x);
      case OpKind::kFlatten:
        return Flatten(op, x);
      case OpKind::kReshape:
        return Reshape(op, x);
    }
    return OpFail(op, xn, "unknown op");
  }

  // A dense layer: x [..., in] times the weight [out, in], plus the bias [out].
  Result<Shape> Dense(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    if (x.empty()) {
      return OpFail(op, xn, "dense needs rank >= 1");
    }
    std::optional<WeightSpec> w = weights_(op.weight);
    if (w && w->shape.size() != 2) {
      return OpFail(
          op, op.weight,
          "dense weight must be [out_features, in_features], got " + ShapeToString(w->shape));
    }
    int64_t out_features = w ? w->shape[0] : 0;
    FERRY_RETURN_IF_ERROR(Weight(op, op.weight, {out_features, x.back()}));
    if (!op.bias.empty()) {
      FERRY_RETURN_IF_ERROR(Weight(op, op.bias, {out_features}));
    }
    Shape out = x;
    out.back() = out_features;
    return out;
  }

  // Layer normalisation over the last axis, with its weight and bias.
  Result<Shape> LayerNorm(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    if (x.empty()) {
      return OpFail(op, xn, "layernorm needs rank >= 1");
    }
    FERRY_RETURN_IF_ERROR(Weight(op, op.weight, {x.back()}));
    FERRY_RETURN_IF_ERROR(Weight(op, op.bias, {x.back()}));
    return x;
  }

  // A 2-D convolution of [N, C, H, W] by the weight [O, C / groups, KH, KW].
  Result<Shape> Conv2d(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    if (x.size() != 4) {
      return OpFail(op, xn, "conv2d needs [N, C, H, W], got " + ShapeToString(x));
    }
    std::optional<WeightSpec> w = weights_(op.weight);
    if (!w || w->shape.size() != 4) {
      return OpFail(op, op.weight,
                    w ? "conv2d weight must be [O, C, KH, KW], got " + ShapeToString(w->shape)
                      : "no such weight in weights.safetensors");
    }
    Shape ws = w->shape;
    if (op.groups < 1 || x[1] % op.groups != 0 || ws[0] % op.groups != 0) {
      return OpFail(op, op.weight,
                    "groups " + std::to_string(op.groups) + " must divide the " +
                        std::to_string(x[1]) + " input and " + std::to_string(ws[0]) +
                        " output channels");
    }
    FERRY_RETURN_IF_ERROR(Weight(op, op.weight, {ws[0], x[1] / op.groups, ws[2], ws[3]}));
    if (!op.bias.empty()) {
      FERRY_RETURN_IF_ERROR(Weight(op, op.bias, {ws[0]}));
    }
    return Window(op, x, ws[0], {ws[2], ws[3]});
  }

  // The mean, sum, maximum or arg_max over one axis (never the batch axis of a batched model).
  Result<Shape> Reduce(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    int64_t rank = static_cast<int64_t>(x.size());
    if (op.axis < -rank || op.axis >= rank) {
      return OpFail(op, xn,
                    "axis " + std::to_string(op.axis) + " is out of range for " + ShapeToString(x));
    }
    int64_t axis = op.axis < 0 ? op.axis + rank : op.axis;
    if (axis == 0 && !m_.unbatched()) {
      return OpFail(
          op, xn,
          std::string(OpKindName(op.kind)) + " over axis 0 would mix the requests of a batch");
    }
    if (op.kind == OpKind::kArgMax && x[static_cast<size_t>(axis)] > (int64_t{1} << 24)) {
      return OpFail(op, xn, "arg_max over more than 2^24 elements: its indices would not be exact");
    }
    Shape out = x;
    out.erase(out.begin() + axis);
    return out;
  }

  // Tensors of one rank joined along an axis (never the batch axis of a batched model); every
  // other axis equal.
  Result<Shape> Concat(const Op& op, const Shape& x) {
    int64_t rank = static_cast<int64_t>(x.size());
    if (op.axis < -rank || op.axis >= rank) {
      return OpFail(op, op.inputs[0],
                    "axis " + std::to_string(op.axis) + " is out of range for " + ShapeToString(x));
    }
    size_t axis = static_cast<size_t>(op.axis < 0 ? op.axis + rank : op.axis);
    if (axis == 0 && !m_.unbatched()) {
      return OpFail(op, op.inputs[0], "concat along axis 0 would mix the requests of a batch");
    }
    Shape out = x;
    for (size_t i = 1; i < op.inputs.size(); ++i) {
      const Shape& other = shapes_.at(op.inputs[i]);
      Shape rest = other;
      if (other.size() == x.size()) {
        rest[axis] = x[axis];
      }
      if (rest != x) {
        return OpFail(op, op.inputs[i],
                      ShapeToString(other) + " does not match " + ShapeToString(x) +
                          " on every axis but " + std::to_string(axis));
      }
      out[axis] += other[axis];  // Each at most 2^40 elements: no overflow.
    }
    return out;
  }

  // Everything after the batch axis flattened into one axis.
  Result<Shape> Flatten(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    if (x.size() < 2) {
      return OpFail(op, xn, "flatten needs rank >= 2, got " + ShapeToString(x));
    }
    std::optional<int64_t> rest = NumElements(Shape(x.begin() + 1, x.end()));
    if (!rest) {
      return OpFail(op, xn, "flattening " + ShapeToString(x) + " overflows 2^40 elements");
    }
    return Shape{x[0], *rest};
  }

  // The axes after the batch axis reshaped to op.shape.
  Result<Shape> Reshape(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    if (x.empty()) {
      return OpFail(op, xn, "cannot reshape a tensor of rank 0");
    }
    Shape rest(x.begin() + 1, x.end());
    std::optional<int64_t> have = NumElements(rest);
    std::optional<int64_t> want = NumElements(op.shape);
    if (x.empty() || !want || have != want) {
      return OpFail(op, xn,
                    "cannot reshape " + ShapeToString(x) + " to [" +
                        std::to_string(x.empty() ? 0 : x[0]) + "] + " + ShapeToString(op.shape));
    }
    Shape out{x[0]};
    out.insert(out.end(), op.shape.begin(), op.shape.end());
    return out;
  }

  // [start, end) along one axis after the batch axis.
  Result<Shape> Slice(const Op& op, const Shape& x) {
    int64_t rank = static_cast<int64_t>(x.size());
    if (op.axis < -rank || op.axis >= rank) {
      return OpFail(op, op.inputs[0],
                    "axis " + std::to_string(op.axis) + " is out of range for " + ShapeToString(x));
    }
    auto axis = static_cast<size_t>(op.axis < 0 ? op.axis + rank : op.axis);
    if (axis == 0 && !m_.unbatched()) {
      return OpFail(op, op.inputs[0], "slice along axis 0 would cut the requests of a batch");
    }
    if (op.start < 0 || op.start >= op.end || op.end > x[axis]) {
      return OpFail(op, op.inputs[0],
                    "the range [" + std::to_string(op.start) + ", " + std::to_string(op.end) +
                        ") is not inside axis " + std::to_string(axis) + " of " + ShapeToString(x));
    }
    Shape out = x;
    out[axis] = op.end - op.start;
    return out;
  }

  // Numpy broadcasting of x with a second tensor (same rank, the same batch axis 0: requests
  // never mix) or with a weight (of rank at most x's, size 1 at axis 0 when of equal rank:
  // the same constant for every request).
  Result<Shape> Binary(const Op& op, const Shape& x) {
    Shape b;
    std::string bn;
    if (op.inputs.size() == 2) {
      bn = op.inputs[1];
      b = shapes_.at(bn);
      if (b.size() != x.size() || b.empty() || b[0] != x[0]) {
        return OpFail(op, bn,
                      ShapeToString(b) + " and " + ShapeToString(x) +
                          ": two computed operands need the same rank and batch axis");
      }
    } else {
      bn = op.weight;
      std::optional<WeightSpec> w = weights_(op.weight);
      if (!w) {
        return OpFail(op, bn, "no such weight in weights.safetensors");
      }
      FERRY_RETURN_IF_ERROR(Weight(op, op.weight, w->shape));
      b = w->shape;
      if (b.size() > x.size() || (b.size() == x.size() && !b.empty() && b[0] != 1)) {
        return OpFail(op, bn,
                      "a constant operand " + ShapeToString(b) +
                          " may not span the batch axis of " + ShapeToString(x));
      }
    }
    Shape out = x;
    for (size_t i = 0; i < b.size(); ++i) {
      int64_t& o = out[out.size() - b.size() + i];
      if (b[i] != o && b[i] != 1 && o != 1) {
        return OpFail(op, bn, ShapeToString(b) + " does not broadcast with " + ShapeToString(x));
      }
      o = std::max(o, b[i]);
    }
    return out;
  }

  Result<Shape> Transpose(const Op& op, const Shape& x) {
    std::vector<int64_t> sorted = op.perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] != static_cast<int64_t>(i)) {
        sorted.clear();
      }
    }
    if (op.perm.size() != x.size() || sorted.empty() || op.perm[0] != 0) {
      return OpFail(op, op.inputs[0],
                    "perm must reorder every axis of " + ShapeToString(x) + " and keep axis 0");
    }
    Shape out;
    for (int64_t axis : op.perm) {
      out.push_back(x[static_cast<size_t>(axis)]);
    }
    return out;
  }

  // [..., M, K] x [..., K, N]: the leading axes (the batch axis among them) equal.
  Result<Shape> MatMul(const Op& op, const Shape& a) {
    const Shape& b = shapes_.at(op.inputs[1]);
    size_t r = a.size();
    if (r < 3 || b.size() != r || !std::equal(a.begin(), a.end() - 2, b.begin()) ||
        a[r - 1] != b[r - 2]) {
      return OpFail(op, op.inputs[1],
                    "matmul needs [..., M, K] x [..., K, N] with equal leading axes (rank >= 3), "
                    "got " +
                        ShapeToString(a) + " x " + ShapeToString(b));
    }
    Shape out = a;
    out.back() = b.back();
    return out;
  }

  // gather: rows of the table [V, D] picked by integer indices, which must be a model input
  // whose declared range lies within the table. Indices reach the program as FP32, exact up
  // to 2^24, so V is at most 2^24: any larger index converts to a value >= V, never into
  // the table.
  Result<Shape> Gather(const Op& op, const Shape& x) {
    const std::string& xn = op.inputs[0];
    auto input = std::find_if(m_.inputs.begin(), m_.inputs.end(),
                              [&](const TensorSpec& spec) { return spec.name == xn; });
    if (input == m_.inputs.end() || !IsInteger(input->dtype) || input->dtype == DType::kBool) {
      return OpFail(op, xn, "gather's indices must be an integer model input");
    }
    std::optional<WeightSpec> w = weights_(op.weight);
    if (!w || w->shape.size() != 2) {
      return OpFail(op, op.weight,
                    w ? "gather's table must be [rows, width], got " + ShapeToString(w->shape)
                      : "no such weight in weights.safetensors");
    }
    FERRY_RETURN_IF_ERROR(Weight(op, op.weight, w->shape));
    int64_t rows = w->shape[0];
    if (rows > kMaxGatherRows) {
      return OpFail(op, op.weight,
                    std::to_string(rows) +
                        " rows; a gather table has at most 2^24 (indices "
                        "are exact in FP32 only that far)");
    }
    if (!input->range || (*input->range)[0] < 0 || (*input->range)[1] >= rows) {
      return OpFail(op, xn,
                    "declare range = [0, " + std::to_string(rows - 1) +
                        "] (or narrower) on the input, so every index is checked before it runs");
    }
    Shape out = x;
    out.push_back(w->shape[1]);
    return out;
  }

  // Output of a 2-D window op (conv2d, maxpool2d) over [N, C, H, W].
  Result<Shape> Window(const Op& op, const Shape& x, int64_t channels,
                       std::array<int64_t, 2> kernel) {
    Shape out{x[0], channels, 0, 0};
    for (int i = 0; i < 2; ++i) {
      int64_t span = x[2 + i] + 2 * op.padding[i] - kernel[i];
      if (span < 0) {
        return OpFail(op, op.inputs[0],
                      "kernel " + std::to_string(kernel[i]) + " is larger than the padded input " +
                          ShapeToString(x));
      }
      out[2 + i] = PooledSize(x[2 + i], kernel[i], op.stride[i], op.padding[i], op.ceil);
    }
    return out;
  }

  const Manifest& m_;
  const ShapeVariant& v_;
  int64_t batch_;
  const WeightLookup& weights_;
  size_t op_index_ = 0;
  std::map<std::string, Shape> shapes_;
};

}  // namespace

int64_t PooledSize(int64_t size, int64_t kernel, int64_t stride, int64_t pad, bool ceil) {
  int64_t span = size + 2 * pad - kernel;
  if (!ceil) {
    return span / stride + 1;
  }
  int64_t out = (span + stride - 1) / stride + 1;
  if ((out - 1) * stride >= size + pad) {
    --out;
  }
  return out;
}

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

std::optional<int64_t> NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && n > kMaxElements / d)) {
      return std::nullopt;
    }
    n *= d;
  }
  return n;
}

Result<std::map<std::string, Shape>> InferShapes(const Manifest& manifest,
                                                 const ShapeVariant& variant, int64_t batch,
                                                 const WeightLookup& weights) {
  return Inference(manifest, variant, batch, weights).Run();
}

}  // namespace ferry
