#include "worker/backends/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ferry::cpu {

void Dense(std::span<const float> x, std::span<const float> w, std::span<const float> b, int64_t m,
           int64_t k, int64_t n, std::span<float> y, ThreadPool* pool) {
  // Parallel over the output cells (row-major), so one row or many both use every thread.
  auto cells = [&](int64_t begin, int64_t end) {
    for (int64_t cell = begin; cell < end; ++cell) {
      int64_t i = cell / n, j = cell % n;
      const float* xi = x.data() + i * k;
      const float* wj = w.data() + j * k;
      double sum = b.empty() ? 0.0 : b[static_cast<size_t>(j)];
      for (int64_t t = 0; t < k; ++t) {
        sum += static_cast<double>(xi[t]) * wj[t];
      }
      y[static_cast<size_t>(cell)] = static_cast<float>(sum);
    }
  };
  int64_t min_cells = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k));
  if (pool != nullptr) {
    pool->ParallelFor(m * n, min_cells, cells);
  } else {
    cells(0, m * n);
  }
}

void Relu(std::span<const float> x, std::span<float> y) {
  std::transform(x.begin(), x.end(), y.begin(), [](float v) { return v > 0 ? v : 0.0f; });
}

void Gelu(std::span<const float> x, std::span<float> y) {
  std::transform(x.begin(), x.end(), y.begin(), [](float v) {
    double d = v;
    return static_cast<float>(0.5 * d * (1.0 + std::erf(d / std::sqrt(2.0))));
  });
}

void Tanh(std::span<const float> x, std::span<float> y) {
  std::transform(x.begin(), x.end(), y.begin(), [](float v) { return std::tanh(v); });
}

void Sigmoid(std::span<const float> x, std::span<float> y) {
  std::transform(x.begin(), x.end(), y.begin(), [](float v) {
    return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
  });
}

void Add(std::span<const float> a, std::span<const float> b, std::span<float> y) {
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = a[i] + b[i];
  }
}

void Softmax(std::span<const float> x, const Shape& shape, int64_t axis, std::span<float> y) {
  int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0) {
    axis += rank;
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) {
    outer *= shape[static_cast<size_t>(i)];
  }
  for (int64_t i = axis + 1; i < rank; ++i) {
    inner *= shape[static_cast<size_t>(i)];
  }
  int64_t n = shape[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) { return static_cast<size_t>((o * n + i) * inner + in); };
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        max = std::max<double>(max, x[at(i)]);
      }
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        sum += std::exp(x[at(i)] - max);
      }
      for (int64_t i = 0; i < n; ++i) {
        y[at(i)] = static_cast<float>(std::exp(x[at(i)] - max) / sum);
      }
    }
  }
}

void LayerNorm(std::span<const float> x, int64_t d, std::span<const float> w,
               std::span<const float> b, double eps, std::span<float> y) {
  int64_t rows = static_cast<int64_t>(x.size()) / d;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * d;
    double mean = 0;
    for (int64_t i = 0; i < d; ++i) {
      mean += xr[i];
    }
    mean /= static_cast<double>(d);
    double var = 0;
    for (int64_t i = 0; i < d; ++i) {
      var += (xr[i] - mean) * (xr[i] - mean);
    }
    var /= static_cast<double>(d);
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < d; ++i) {
      y[static_cast<size_t>(r * d + i)] = static_cast<float>(
          (xr[i] - mean) * inv * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]);
    }
  }
}

void Clip(std::span<const float> x, float lo, float hi, std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = std::min(std::max(x[i], lo), hi);
  }
}

void Conv2d(std::span<const float> x, const Shape& xs, std::span<const float> w, const Shape& ws,
            std::span<const float> b, const Window& win, const Shape& ys, std::span<float> y,
            ThreadPool* pool) {
  int64_t c = xs[1], h = xs[2], wd = xs[3];
  int64_t kh = ws[2], kw = ws[3];
  int64_t o_channels = ys[1], ho = ys[2], wo = ys[3];
  int64_t c_group = c / win.groups, o_group = o_channels / win.groups;
  auto planes = [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      int64_t n = plane / o_channels, o = plane % o_channels;
      int64_t first = (o / o_group) * c_group;  // The group's first input channel.
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          double sum = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
          for (int64_t ci = 0; ci < c_group; ++ci) {
            for (int64_t ky = 0; ky < kh; ++ky) {
              int64_t iy = oy * win.stride[0] - win.padding[0] + ky;
              if (iy < 0 || iy >= h) {
                continue;
              }
              for (int64_t kx = 0; kx < kw; ++kx) {
                int64_t ix = ox * win.stride[1] - win.padding[1] + kx;
                if (ix < 0 || ix >= wd) {
                  continue;
                }
                sum += static_cast<double>(
                           x[static_cast<size_t>(((n * c + first + ci) * h + iy) * wd + ix)]) *
                       w[static_cast<size_t>(((o * c_group + ci) * kh + ky) * kw + kx)];
              }
            }
          }
          y[static_cast<size_t>(((n * o_channels + o) * ho + oy) * wo + ox)] =
              static_cast<float>(sum);
        }
      }
    }
  };
  int64_t total = ys[0] * o_channels;
  if (pool != nullptr) {
    pool->ParallelFor(total, 1, planes);
  } else {
    planes(0, total);
  }
}

void MaxPool2d(std::span<const float> x, const Shape& xs, const Window& win, const Shape& ys,
               std::span<float> y) {
  int64_t h = xs[2], wd = xs[3], ho = ys[2], wo = ys[3];
  for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane) {
    for (int64_t oy = 0; oy < ho; ++oy) {
      for (int64_t ox = 0; ox < wo; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t ky = 0; ky < win.kernel[0]; ++ky) {
          int64_t iy = oy * win.stride[0] - win.padding[0] + ky;
          for (int64_t kx = 0; kx < win.kernel[1]; ++kx) {
            int64_t ix = ox * win.stride[1] - win.padding[1] + kx;
            if (iy >= 0 && iy < h && ix >= 0 && ix < wd) {
              best = std::max(best, x[static_cast<size_t>((plane * h + iy) * wd + ix)]);
            }
          }
        }
        y[static_cast<size_t>((plane * ho + oy) * wo + ox)] = best;
      }
    }
  }
}

void GlobalAvgPool(std::span<const float> x, const Shape& xs, std::span<float> y) {
  int64_t area = xs[2] * xs[3];
  for (int64_t plane = 0; plane < xs[0] * xs[1]; ++plane) {
    double sum = 0;
    for (int64_t i = 0; i < area; ++i) {
      sum += x[static_cast<size_t>(plane * area + i)];
    }
    y[static_cast<size_t>(plane)] = static_cast<float>(sum / static_cast<double>(area));
  }
}

Status Gather(std::span<const float> x, std::span<const float> table, int64_t rows, int64_t width,
              std::span<float> y) {
  for (size_t i = 0; i < x.size(); ++i) {
    float index = x[i];
    // Also false for NaN: every comparison with it is.
    if (!(index >= 0.0f && index < static_cast<float>(rows)) || index != std::floor(index)) {
      return InvalidArgument("gather: index " + std::to_string(index) + " at " + std::to_string(i) +
                             " is not an integer in [0, " + std::to_string(rows) + ")");
    }
    const float* row = table.data() + static_cast<int64_t>(index) * width;
    std::copy(row, row + width, y.begin() + static_cast<int64_t>(i) * width);
  }
  return OkStatus();
}

}  // namespace ferry::cpu
