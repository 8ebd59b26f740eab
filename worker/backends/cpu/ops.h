// fp32 reference kernels for every program op (docs/bundles.md, Ops). Dot products accumulate
// in double so the CPU executor is a tight reference (PyTorch agreement well under 1e-5).
//
// Thread safety: safe for concurrent use on distinct outputs; `pool` may be null (serial).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "common/result.h"
#include "model/manifest.h"
#include "worker/backends/cpu/thread_pool.h"

namespace ferry::cpu {

// y[m, n] = sum_k x[m, k] * w[n, k] + b[n]   (w is [N, K] as in PyTorch Linear; b may be empty)
void Dense(std::span<const float> x, std::span<const float> w, std::span<const float> b, int64_t m,
           int64_t k, int64_t n, std::span<float> y, ThreadPool* pool);

void Relu(std::span<const float> x, std::span<float> y);
void Gelu(std::span<const float> x, std::span<float> y);  // Exact: 0.5 x (1 + erf(x / sqrt 2)).
void Tanh(std::span<const float> x, std::span<float> y);
void Sigmoid(std::span<const float> x, std::span<float> y);
void Add(std::span<const float> a, std::span<const float> b, std::span<float> y);
// y = min(max(x, lo), hi)
void Clip(std::span<const float> x, float lo, float hi, std::span<float> y);

// Softmax along `axis` of `shape` (negative counts from the end).
void Softmax(std::span<const float> x, const Shape& shape, int64_t axis, std::span<float> y);
// Normalises over the last dimension d, then scales and shifts.
void LayerNorm(std::span<const float> x, int64_t d, std::span<const float> w,
               std::span<const float> b, double eps, std::span<float> y);

struct Window {
  std::array<int64_t, 2> kernel;
  std::array<int64_t, 2> stride;
  std::array<int64_t, 2> padding;
  int64_t groups = 1;  // Conv2d: channel groups.
};

// NCHW input, OIHW weight (I = C / groups: output channel o reads the input channels of
// group o / (O / groups)), bias [O] or empty; out is [N, O, Ho, Wo].
void Conv2d(std::span<const float> x, const Shape& x_shape, std::span<const float> w,
            const Shape& w_shape, std::span<const float> b, const Window& window,
            const Shape& y_shape, std::span<float> y, ThreadPool* pool);
// Padding counts as -infinity.
void MaxPool2d(std::span<const float> x, const Shape& x_shape, const Window& window,
               const Shape& y_shape, std::span<float> y);
// y[..., :] = table[index(x[...]), :] for a [rows, width] table. The indices arrive as FP32
// (model/dtype_convert.h); INVALID_ARGUMENT naming the first one that is not an integer in
// [0, rows) (the hook host checks each request's range first: only a peer that bypassed it
// gets here).
Status Gather(std::span<const float> x, std::span<const float> table, int64_t rows, int64_t width,
              std::span<float> y);
// [N, C, H, W] -> [N, C]
void GlobalAvgPool(std::span<const float> x, const Shape& x_shape, std::span<float> y);

}  // namespace ferry::cpu
