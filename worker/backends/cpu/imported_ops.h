// fp32 reference kernels for the ops imported ONNX models bring beyond the first program
// format (docs/bundles.md, Ops): the piecewise activations, log softmax, average pooling,
// reductions and concatenation. Sums accumulate in double, as in ops.h.
//
// Thread safety: safe for concurrent use on distinct outputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/manifest.h"
#include "worker/backends/cpu/ops.h"

namespace ferry::cpu {

// leaky_relu: x < 0 ? alpha x : x. hard_sigmoid: max(0, min(1, alpha x + beta)).
// hard_swish: x max(0, min(1, x / 6 + 1 / 2)). `op` gives the kind and alpha, beta.
void Piecewise(const Op& op, std::span<const float> x, std::span<float> y);

// log(softmax(x)) along `axis` of `shape` (negative counts from the end).
void LogSoftmax(std::span<const float> x, const Shape& shape, int64_t axis, std::span<float> y);

// The mean of each window of [N, C, H, W]; padding counts as zeros in the divisor when
// `count_pad`, else each window divides by the elements inside the input.
void AvgPool2d(std::span<const float> x, const Shape& x_shape, const Window& window, bool count_pad,
               const Shape& y_shape, std::span<float> y);

// The mean, sum or maximum (`kind` kReduceMean, kReduceSum, kReduceMax) over `axis` of
// `shape` (negative counts from the end), the axis removed.
void Reduce(OpKind kind, std::span<const float> x, const Shape& shape, int64_t axis,
            std::span<float> y);

// The index (0-based, as a float: exact to 2^24) of the maximum along `axis` of `shape`, the
// axis removed; the first of equal maxima, or the last when `last`. A NaN is the maximum.
void ArgMax(std::span<const float> x, const Shape& shape, int64_t axis, bool last,
            std::span<float> y);

// The parts joined along `axis` (counted from the front); every other axis equal.
// REQUIRES: parts.size() == shapes.size(); y holds the sum of their sizes.
void Concat(const std::vector<std::span<const float>>& parts, const std::vector<Shape>& shapes,
            int64_t axis, std::span<float> y);

}  // namespace ferry::cpu
