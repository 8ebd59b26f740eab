// The per-element arithmetic of the CUDA backend's tensor kernels, written once for the device
// and the host: kernels.cu runs these functions in grid-stride loops, and device_math_test runs
// the same functions on the host against the CPU reference kernels (worker/backends/cpu), so
// their index arithmetic and semantics are tested on machines without a GPU. Plain structs
// and inline functions only: no CUDA headers, no allocation.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif

namespace ferry::cuda {

inline constexpr int kMaxViewRank = 8;  // As manifests' kMaxRank.

// An output of `rank` axes `dims` (row-major) whose element reads operand A (and B) through
// per-axis element strides: 0 on an axis the operand is broadcast along, permuted strides for a
// transpose.
struct StridedView {
  int rank = 0;
  int64_t dims[kMaxViewRank] = {};
  int64_t a[kMaxViewRank] = {};
  int64_t b[kMaxViewRank] = {};
};

// The element offsets into A and B of output element `i`.
FERRY_HD inline void SourceOffsets(const StridedView& v, int64_t i, int64_t* a, int64_t* b) {
  int64_t oa = 0, ob = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    int64_t c = i % v.dims[d];
    i /= v.dims[d];
    oa += c * v.a[d];
    ob += c * v.b[d];
  }
  *a = oa;
  *b = ob;
}

// NaN test spelled alike on host and device (no fast-math anywhere in the build).
FERRY_HD inline bool IsNan(float v) { return v != v; }

enum class BinaryOp : int { kAdd = 0, kSub = 1, kMul = 2, kDiv = 3 };

FERRY_HD inline float ApplyBinary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    default:
      return a + b;
  }
}

// y[i] of a broadcast binary op.
FERRY_HD inline float BroadcastAt(const StridedView& v, BinaryOp op, const float* a, const float* b,
                                  int64_t i) {
  int64_t oa = 0, ob = 0;
  SourceOffsets(v, i, &oa, &ob);
  return ApplyBinary(op, a[oa], b[ob]);
}

// Row `id` of a [rows, width] table, element `i` of the output [ids, width]; NaN for an id
// that is not an integer in [0, rows) (the load refuses ids without such a range, and the
// hook host checks every request against it, so this is a guard, never an answer).
FERRY_HD inline float GatherAt(const float* ids, const float* table, int64_t rows, int64_t width,
                               int64_t i) {
  float id = ids[i / width];
  if (!(id >= 0.f && id < static_cast<float>(rows)) || id != floorf(id)) {
    return NAN;
  }
  return table[static_cast<int64_t>(id) * width + i % width];
}

// What an axis op computes along the middle axis of [outer, n, inner].
enum class AxisOp : int {
  kReduceMean = 0,
  kReduceSum = 1,
  kReduceMax = 2,
  kLogSoftmax = 3,
  kArgMax = 4
};

// Line `line` (= o * inner + k) of x viewed as [outer, n, inner]. Reductions and arg_max write
// y[line] (y is [outer, inner]); log_softmax writes the line's n elements of y (x's shape).
// Semantics as the CPU reference (imported_ops.h): max propagates NaN, arg_max picks the
// first NaN or the first (or `last`) maximum.
FERRY_HD inline void AxisLine(AxisOp op, const float* x, float* y, int64_t n, int64_t inner,
                              int64_t line, bool last) {
  int64_t o = line / inner, k = line % inner;
  const float* xs = x + o * n * inner + k;
  if (op == AxisOp::kArgMax) {
    int64_t best = 0;
    float max = xs[0];
    for (int64_t j = 1; j < n && !IsNan(max); ++j) {
      float v = xs[j * inner];
      if (IsNan(v) || v > max || (last && v == max)) {
        best = j;
        max = v;
      }
    }
    y[line] = static_cast<float>(best);
    return;
  }
  float sum = 0.f, max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    float v = xs[j * inner];
    sum += v;
    max = IsNan(v) || IsNan(max) ? NAN : fmaxf(max, v);
  }
  switch (op) {
    case AxisOp::kReduceMax:
      y[line] = max;
      return;
    case AxisOp::kReduceSum:
      y[line] = sum;
      return;
    case AxisOp::kReduceMean:
      y[line] = sum / static_cast<float>(n);
      return;
    default: {  // kLogSoftmax
      float total = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        total += expf(xs[j * inner] - max);
      }
      float log_total = logf(total);
      float* ys = y + o * n * inner + k;
      for (int64_t j = 0; j < n; ++j) {
        ys[j * inner] = xs[j * inner] - max - log_total;
      }
      return;
    }
  }
}

// Average pooling over [planes, h, w] -> [planes, ho, wo].
struct PoolShape {
  int64_t planes, h, w;  // Input planes (N x C) and their size.
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t ho, wo;
};

// Output element `i`: the mean of the window's input elements, or with `count_pad` of the
// window's elements inside the padded input (padding counted as zeros), as the CPU reference.
FERRY_HD inline float AvgPoolAt(const float* x, const PoolShape& s, bool count_pad, int64_t i) {
  int64_t ox = i % s.wo, oy = (i / s.wo) % s.ho, plane = i / (s.wo * s.ho);
  float sum = 0.f;
  int64_t inside = 0, padded = 0;
  for (int64_t ky = 0; ky < s.kh; ++ky) {
    int64_t iy = oy * s.sh - s.ph + ky;
    for (int64_t kx = 0; kx < s.kw; ++kx) {
      int64_t ix = ox * s.sw - s.pw + kx;
      bool in_pad = iy >= -s.ph && iy < s.h + s.ph && ix >= -s.pw && ix < s.w + s.pw;
      padded += in_pad ? 1 : 0;
      if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) {
        sum += x[(plane * s.h + iy) * s.w + ix];
        ++inside;
      }
    }
  }
  int64_t count = count_pad ? padded : inside;
  return count > 0 ? sum / static_cast<float>(count) : 0.f;
}

}  // namespace ferry::cuda
