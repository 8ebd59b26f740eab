// The converters of the spatial ops: Conv (grouped and depthwise too), BatchNormalization
// (folded, or a diagonal 1x1 conv2d), MaxPool, AveragePool and GlobalAveragePool
// (docs/models.md, "Ops").
#include <algorithm>
#include <cmath>

#include "model/onnx/op_helpers.h"
#include "model/shape_inference.h"

namespace ferry::onnx_import {
namespace {

// An unfolded batch norm becomes a C x C diagonal weight: at most 16 Mi floats (64 MiB).
constexpr int64_t kMaxDiagonalChannels = 4096;

// The two spatial values of attribute `name` (default `fallback` for both), each in
// [0, 2^20].
Result<std::array<int64_t, 2>> Pair(Converter& c, Attributes& attrs, const std::string& name,
                                    int64_t fallback) {
  std::vector<int64_t> v = attrs.Ints(name, {fallback, fallback});
  if (v.size() != 2 || v[0] < 0 || v[1] < 0 || v[0] > (1 << 20) || v[1] > (1 << 20)) {
    return c.Fail(name + " must hold two values for a 2-D op");
  }
  return std::array<int64_t, 2>{v[0], v[1]};
}

// The symmetric padding of a window of `kernel` at `stride` over `x` [N, C, H, W]: explicit
// pads [top, left, bottom, right], or auto_pad SAME_* where the total padding is even.
Result<std::array<int64_t, 2>> Window(Converter& c, Attributes& attrs, const Shape& x,
                                      std::array<int64_t, 2> kernel,
                                      std::array<int64_t, 2> stride) {
  std::string auto_pad = attrs.String("auto_pad", "NOTSET");
  std::vector<int64_t> pads = attrs.Ints("pads", {0, 0, 0, 0});
  FERRY_ASSIGN_OR_RETURN(auto dilations, Pair(c, attrs, "dilations", 1));
  if (dilations != std::array<int64_t, 2>{1, 1}) {
    return c.Fail("dilations other than 1 are not supported");
  }
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    pads.assign(4, 0);
    for (int i = 0; i < 2; ++i) {
      int64_t out = stride[i] > 0 ? (x[2 + i] + stride[i] - 1) / stride[i] : 0;
      int64_t total = std::max<int64_t>((out - 1) * stride[i] + kernel[i] - x[2 + i], 0);
      if (total % 2 != 0) {
        return c.Fail("auto_pad " + auto_pad + " pads axis " + std::to_string(2 + i) +
                      " unevenly, which is not supported");
      }
      pads[i] = pads[i + 2] = total / 2;
    }
  } else if (auto_pad != "NOTSET" && !(auto_pad == "VALID" && pads == std::vector<int64_t>(4, 0))) {
    return c.Fail("auto_pad " + auto_pad + " is not supported");
  }
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3] || pads[0] < 0 || pads[1] < 0 ||
      pads[0] > (1 << 20) || pads[1] > (1 << 20)) {
    return c.Fail("pads must be symmetric: [top, left, top, left]");
  }
  return std::array<int64_t, 2>{pads[0], pads[1]};
}

// [N, C, H', W'] for a window of `kernel` at `stride` over `x` padded by `pad`.
Result<Shape> Windowed(Converter& c, const Shape& x, int64_t channels,
                       std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                       std::array<int64_t, 2> pad) {
  Shape out = {kBatchDim, channels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    int64_t span = x[2 + i] + 2 * pad[i] - kernel[i];
    if (stride[i] < 1 || kernel[i] < 1 || span < 0) {
      return c.Fail("the window " + Dims({kernel[0], kernel[1]}) + " does not fit the input " +
                    Dims(x) + " with its padding");
    }
    out[2 + i] = span / stride[i] + 1;
  }
  return out;
}

}  // namespace

Status Conv(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* w, c.Constant(1));
  int64_t group = attrs.Int("group", 1);
  if (x->shape.size() != 4 || w->integer || w->dims.size() != 4 || group < 1 ||
      w->dims[1] * group != x->shape[1] || w->dims[0] % group != 0) {
    return c.Fail(
        "only 2-D convolution of [N, C, H, W] by a float [O, C / group, KH, KW] "
        "weight is supported; got " +
        Dims(x->shape) + " by " + Dims(w->dims) + " in " + std::to_string(group) + " groups");
  }
  std::array<int64_t, 2> kernel = {w->dims[2], w->dims[3]};
  FERRY_ASSIGN_OR_RETURN(auto declared, Pair(c, attrs, "kernel_shape", kernel[0]));
  if (attrs.Has("kernel_shape") && declared != kernel) {
    return c.Fail("kernel_shape differs from the weight's " + Dims(w->dims));
  }
  FERRY_ASSIGN_OR_RETURN(auto stride, Pair(c, attrs, "strides", 1));
  FERRY_ASSIGN_OR_RETURN(auto pad, Window(c, attrs, x->shape, kernel, stride));
  FERRY_ASSIGN_OR_RETURN(Shape shape, Windowed(c, x->shape, w->dims[0], kernel, stride, pad));
  Op op;
  op.kind = OpKind::kConv2d;
  op.inputs = {x->tensor};
  op.stride = stride;
  op.padding = pad;
  op.groups = group;
  op.weight = c.AddWeight(".weight", w->dims, w->floats);
  if (c.Input(2) != nullptr) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* b, c.Constant(2));
    FERRY_ASSIGN_OR_RETURN(std::vector<float> bias, ChannelVector(c, *b, w->dims[0], "B"));
    op.bias = c.AddWeight(".bias", {w->dims[0]}, std::move(bias));
  }
  c.Emit(op, shape);
  return OkStatus();
}

// Folded into the Conv (or the Gemm / MatMul over [N, C]) that alone feeds it:
// w' = w * s, b' = (b - mean) * s + beta, s = scale / sqrt(var + epsilon). Anywhere else, a
// conv2d 1x1 (or dense) with the diagonal weight diag(s) and that bias: exact, at C^2 cost.
Status BatchNormalization(Converter& c, Attributes& attrs) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  float eps = attrs.Float("epsilon", 1e-5f);
  attrs.Float("momentum", 0.9f);
  if (attrs.Int("training_mode", 0) != 0) {
    return c.Fail("training_mode must be 0 for inference");
  }
  size_t rank = x->shape.size();
  if (rank != 2 && rank != 4) {
    return c.Fail("only [N, C] and [N, C, H, W] inputs are supported; got " + Dims(x->shape));
  }
  int64_t channels = x->shape[1];
  std::vector<std::vector<float>> p(4);
  const char* names[] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 0; i < 4; ++i) {
    FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, c.Constant(i + 1));
    FERRY_ASSIGN_OR_RETURN(p[i], ChannelVector(c, *t, channels, names[i]));
  }
  Op* producer = c.SoleProducer(*x);
  bool fold = producer != nullptr && (producer->kind == OpKind::kConv2d ||
                                      (producer->kind == OpKind::kDense && rank == 2));
  auto n = static_cast<size_t>(channels);
  if (!fold && channels > kMaxDiagonalChannels) {
    return c.Fail("a BatchNormalization over " + std::to_string(channels) +
                  " channels with no Conv or Gemm to fold into would need a " +
                  std::to_string(channels) + "^2 diagonal weight; at most " +
                  std::to_string(kMaxDiagonalChannels) + " channels are converted so");
  }
  if (!fold) {
    Op op;
    op.kind = rank == 4 ? OpKind::kConv2d : OpKind::kDense;
    op.inputs = {x->tensor};
    std::vector<float> diagonal(n * n, 0.0f);
    for (size_t o = 0; o < n; ++o) {
      diagonal[o * n + o] = 1.0f;
    }
    op.weight = c.AddWeight(".weight",
                            rank == 4 ? Shape{channels, channels, 1, 1} : Shape{channels, channels},
                            std::move(diagonal));
    producer = &c.Emit(op, x->shape);
  }
  if (producer->bias.empty()) {
    producer->bias = c.AddWeight(".bias", {channels}, std::vector<float>(n, 0.0f));
  }
  // References into the weights only after the last AddWeight, which may move them.
  Weight& w = c.WeightNamed(producer->weight);
  Weight& b = c.WeightNamed(producer->bias);
  size_t per_channel = w.values.size() / n;
  for (size_t o = 0; o < n; ++o) {
    float s = p[0][o] / std::sqrt(p[3][o] + eps);
    for (size_t k = 0; k < per_channel; ++k) {
      w.values[o * per_channel + k] *= s;
    }
    b.values[o] = (b.values[o] - p[2][o]) * s + p[1][o];
  }
  if (fold) {
    c.Define(0, *x);
  }
  return OkStatus();
}

namespace {

// MaxPool (`kind` kMaxPool2d) or AveragePool (kAvgPool2d) over [N, C, H, W].
Status Pool(Converter& c, Attributes& attrs, OpKind kind) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (x->shape.size() != 4) {
    return c.Fail("only 2-D pooling of [N, C, H, W] is supported; got " + Dims(x->shape));
  }
  if (!attrs.Has("kernel_shape")) {
    return c.Fail("kernel_shape is required");
  }
  FERRY_ASSIGN_OR_RETURN(auto kernel, Pair(c, attrs, "kernel_shape", 1));
  FERRY_ASSIGN_OR_RETURN(auto stride, Pair(c, attrs, "strides", 1));
  FERRY_ASSIGN_OR_RETURN(auto pad, Window(c, attrs, x->shape, kernel, stride));
  bool ceil = attrs.Int("ceil_mode", 0) != 0;
  if (ceil && kind != OpKind::kMaxPool2d) {
    return c.Fail("ceil_mode must be 0");
  }
  if (kind == OpKind::kMaxPool2d && attrs.Int("storage_order", 0) != 0) {
    return c.Fail("storage_order must be 0");
  }
  bool count_pad = kind == OpKind::kAvgPool2d && attrs.Int("count_include_pad", 0) != 0;
  if (pad[0] * 2 > kernel[0] || pad[1] * 2 > kernel[1]) {
    return c.Fail("pads larger than half the kernel are not supported");
  }
  FERRY_ASSIGN_OR_RETURN(Shape shape, Windowed(c, x->shape, x->shape[1], kernel, stride, pad));
  Op op;
  op.kind = kind;
  op.inputs = {x->tensor};
  op.kernel = kernel;
  op.stride = stride;
  op.padding = pad;
  op.count_pad = count_pad;
  op.ceil = ceil;
  if (ceil) {
    shape[2] = PooledSize(x->shape[2], kernel[0], stride[0], pad[0], true);
    shape[3] = PooledSize(x->shape[3], kernel[1], stride[1], pad[1], true);
  }
  c.Emit(op, shape);
  return OkStatus();
}

}  // namespace

Status MaxPool(Converter& c, Attributes& attrs) { return Pool(c, attrs, OpKind::kMaxPool2d); }
Status AveragePool(Converter& c, Attributes& attrs) { return Pool(c, attrs, OpKind::kAvgPool2d); }

// ferry's global_avgpool gives [N, C]; ONNX keeps [N, C, 1, 1].
Status GlobalAveragePool(Converter& c, Attributes&) {
  FERRY_ASSIGN_OR_RETURN(const Value* x, c.Tensor(0));
  if (x->shape.size() != 4) {
    return c.Fail("only [N, C, H, W] inputs are supported; got " + Dims(x->shape));
  }
  int64_t channels = x->shape[1];
  Op pool;
  pool.kind = OpKind::kGlobalAvgPool;
  pool.inputs = {x->tensor};
  Op reshape;
  reshape.kind = OpKind::kReshape;
  reshape.inputs = {c.Emit(pool, {kBatchDim, channels}).output};
  reshape.shape = {channels, 1, 1};
  c.Emit(reshape, {kBatchDim, channels, 1, 1});
  return OkStatus();
}

}  // namespace ferry::onnx_import
