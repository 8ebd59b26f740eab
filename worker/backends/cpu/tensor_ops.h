// fp32 reference kernels for the tensor ops transformers need: elementwise arithmetic with
// numpy broadcasting, axis permutation, batched matrix products between two computed
// tensors, slices and elementwise sqrt / exp / log (docs/bundles.md, Ops). Shapes are checked by
// model/shape_inference.h first.
//
// Thread safety: safe for concurrent use on distinct outputs.
#pragma once

#include <cstdint>
#include <span>

#include "model/manifest.h"

namespace ferry::cpu {

// y = a OP b for OP in add, sub, mul, div; `a_shape` and `b_shape` broadcast (aligned at the
// right, a missing or size-1 axis repeated) to `y_shape`.
void Broadcast(OpKind op, std::span<const float> a, const Shape& a_shape, std::span<const float> b,
               const Shape& b_shape, const Shape& y_shape, std::span<float> y);
// y axis i = x axis perm[i].
void Transpose(std::span<const float> x, const Shape& x_shape, const std::vector<int64_t>& perm,
               std::span<float> y);
// y[..., m, n] = sum_k a[..., m, k] b[..., k, n], accumulated in double, over `batches`
// leading entries.
void BatchMatMul(std::span<const float> a, std::span<const float> b, int64_t batches, int64_t m,
                 int64_t k, int64_t n, std::span<float> y);
// y = x[..., start:end, ...] along `axis` (counted from the front) of `x_shape`.
// REQUIRES: 0 <= start < end <= x_shape[axis]; y holds the slice.
void Slice(std::span<const float> x, const Shape& x_shape, int64_t axis, int64_t start, int64_t end,
           std::span<float> y);
// y = sqrt(x), exp(x) or log(x) for `op` kSqrt, kExp or kLog (IEEE: NaN below the domain).
void Elementwise(OpKind op, std::span<const float> x, std::span<float> y);

}  // namespace ferry::cpu
