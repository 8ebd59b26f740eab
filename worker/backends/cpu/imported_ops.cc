#include "worker/backends/cpu/imported_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "worker/backends/axis_split.h"

namespace ferry::cpu {

void Piecewise(const Op& op, std::span<const float> x, std::span<float> y) {
  const double alpha = op.alpha, beta = op.beta;
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    switch (op.kind) {
      case OpKind::kLeakyRelu:
        v = v < 0 ? alpha * v : v;
        break;
      case OpKind::kHardSigmoid:
        v = std::clamp(alpha * v + beta, 0.0, 1.0);
        break;
      default:  // kHardSwish
        v = v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
        break;
    }
    y[i] = static_cast<float>(v);
  }
}

void LogSoftmax(std::span<const float> x, const Shape& shape, int64_t axis, std::span<float> y) {
  AxisSplit s = SplitAround(shape, axis);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t in = 0; in < s.inner; ++in) {
      auto at = [&](int64_t i) { return static_cast<size_t>((o * s.n + i) * s.inner + in); };
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < s.n; ++i) {
        max = std::max<double>(max, x[at(i)]);
      }
      double sum = 0;
      for (int64_t i = 0; i < s.n; ++i) {
        sum += std::exp(x[at(i)] - max);
      }
      double log_sum = std::log(sum);
      for (int64_t i = 0; i < s.n; ++i) {
        y[at(i)] = static_cast<float>(x[at(i)] - max - log_sum);
      }
    }
  }
}

void AvgPool2d(std::span<const float> x, const Shape& xs, const Window& win, bool count_pad,
               const Shape& ys, std::span<float> y) {
  int64_t h = xs[2], wd = xs[3], ho = ys[2], wo = ys[3];
  for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane) {
    for (int64_t oy = 0; oy < ho; ++oy) {
      for (int64_t ox = 0; ox < wo; ++ox) {
        double sum = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t ky = 0; ky < win.kernel[0]; ++ky) {
          int64_t iy = oy * win.stride[0] - win.padding[0] + ky;
          for (int64_t kx = 0; kx < win.kernel[1]; ++kx) {
            int64_t ix = ox * win.stride[1] - win.padding[1] + kx;
            // The padded input ends `padding` past each edge; a window never reaches further.
            bool in_pad = iy >= -win.padding[0] && iy < h + win.padding[0] &&
                          ix >= -win.padding[1] && ix < wd + win.padding[1];
            padded += in_pad ? 1 : 0;
            if (iy >= 0 && iy < h && ix >= 0 && ix < wd) {
              sum += x[static_cast<size_t>((plane * h + iy) * wd + ix)];
              ++inside;
            }
          }
        }
        int64_t count = count_pad ? padded : inside;
        y[static_cast<size_t>((plane * ho + oy) * wo + ox)] =
            static_cast<float>(count > 0 ? sum / static_cast<double>(count) : 0.0);
      }
    }
  }
}

void Reduce(OpKind kind, std::span<const float> x, const Shape& shape, int64_t axis,
            std::span<float> y) {
  AxisSplit s = SplitAround(shape, axis);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t k = 0; k < s.inner; ++k) {
      double sum = 0, max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s.n; ++j) {
        double v = x[static_cast<size_t>((o * s.n + j) * s.inner + k)];
        sum += v;
        max = std::isnan(v) || std::isnan(max) ? std::numeric_limits<double>::quiet_NaN()
                                               : std::max(max, v);
      }
      double out = kind == OpKind::kReduceMax   ? max
                   : kind == OpKind::kReduceSum ? sum
                                                : sum / static_cast<double>(s.n);
      y[static_cast<size_t>(o * s.inner + k)] = static_cast<float>(out);
    }
  }
}

void ArgMax(std::span<const float> x, const Shape& shape, int64_t axis, bool last,
            std::span<float> y) {
  AxisSplit s = SplitAround(shape, axis);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t k = 0; k < s.inner; ++k) {
      int64_t best = 0;
      float max = x[static_cast<size_t>(o * s.n * s.inner + k)];
      for (int64_t j = 1; j < s.n && !std::isnan(max); ++j) {
        float v = x[static_cast<size_t>((o * s.n + j) * s.inner + k)];
        if (std::isnan(v) || v > max || (last && v == max)) {
          best = j;
          max = v;
        }
      }
      y[static_cast<size_t>(o * s.inner + k)] = static_cast<float>(best);
    }
  }
}

void Concat(const std::vector<std::span<const float>>& parts, const std::vector<Shape>& shapes,
            int64_t axis, std::span<float> y) {
  // Each part contributes outer blocks of (its axis length x inner) elements, in turn.
  AxisSplit first = SplitAround(shapes[0], axis);
  size_t out = 0;
  for (int64_t o = 0; o < first.outer; ++o) {
    for (size_t p = 0; p < parts.size(); ++p) {
      AxisSplit s = SplitAround(shapes[p], axis);
      size_t block = static_cast<size_t>(s.n * s.inner);
      std::memcpy(y.data() + out, parts[p].data() + static_cast<size_t>(o) * block,
                  block * sizeof(float));
      out += block;
    }
  }
}

}  // namespace ferry::cpu
