#include "worker/backends/cpu/tensor_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ferry::cpu {
namespace {

// Row-major strides of `shape` aligned to `rank` axes, 0 where the axis is broadcast.
std::vector<int64_t> BroadcastStrides(const Shape& shape, size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    size_t axis = rank - shape.size() + i;
    strides[axis] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

float Apply(OpKind op, float a, float b) {
  switch (op) {
    case OpKind::kSub:
      return a - b;
    case OpKind::kMul:
      return a * b;
    case OpKind::kDiv:
      return a / b;
    default:
      return a + b;
  }
}

// y[j] = a[j * sa] OP b[j * sb] for one innermost row. Strides are 0 (broadcast) or 1; the
// three common pairs get loops with constant strides, which the compiler vectorises.
template <typename F>
void RowOf(F f, const float* a, int64_t sa, const float* b, int64_t sb, int64_t n, float* y) {
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j], b[j]);
  } else if (sa == 1 && sb == 0) {
    float v = b[0];
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j], v);
  } else if (sa == 0 && sb == 1) {
    float v = a[0];
    for (int64_t j = 0; j < n; ++j) y[j] = f(v, b[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = f(a[j * sa], b[j * sb]);
  }
}

void Row(OpKind op, const float* a, int64_t sa, const float* b, int64_t sb, int64_t n, float* y) {
  switch (op) {
    case OpKind::kSub:
      return RowOf([](float p, float q) { return p - q; }, a, sa, b, sb, n, y);
    case OpKind::kMul:
      return RowOf([](float p, float q) { return p * q; }, a, sa, b, sb, n, y);
    case OpKind::kDiv:
      return RowOf([](float p, float q) { return p / q; }, a, sa, b, sb, n, y);
    default:
      return RowOf([](float p, float q) { return p + q; }, a, sa, b, sb, n, y);
  }
}

}  // namespace

void Broadcast(OpKind op, std::span<const float> a, const Shape& a_shape, std::span<const float> b,
               const Shape& b_shape, const Shape& y_shape, std::span<float> y) {
  size_t rank = y_shape.size();
  if (rank == 0) {
    y[0] = Apply(op, a[0], b[0]);
    return;
  }
  std::vector<int64_t> sa = BroadcastStrides(a_shape, rank);
  std::vector<int64_t> sb = BroadcastStrides(b_shape, rank);
  int64_t inner = y_shape[rank - 1], step_a = sa[rank - 1], step_b = sb[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t ia = 0, ib = 0;
  for (size_t out = 0; out < y.size(); out += static_cast<size_t>(inner)) {
    // One row of the innermost axis: each operand steps by 1 or stays (broadcast).
    const float* pa = a.data() + ia;
    const float* pb = b.data() + ib;
    float* py = y.data() + out;
    Row(op, pa, step_a, pb, step_b, inner, py);
    // Advance the outer axes like an odometer, moving both operands' offsets with them.
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < y_shape[d]) {
        ia += sa[d];
        ib += sb[d];
        break;
      }
      ia -= sa[d] * (y_shape[d] - 1);
      ib -= sb[d] * (y_shape[d] - 1);
      index[d] = 0;
    }
  }
}

void Transpose(std::span<const float> x, const Shape& x_shape, const std::vector<int64_t>& perm,
               std::span<float> y) {
  size_t rank = x_shape.size();
  if (rank == 0) {
    y[0] = x[0];
    return;
  }
  std::vector<int64_t> x_strides(rank, 1);
  for (size_t i = rank - 1; i-- > 0;) {
    x_strides[i] = x_strides[i + 1] * x_shape[i + 1];
  }
  Shape y_shape(rank);
  std::vector<int64_t> strides(rank);  // Input stride of each output axis.
  for (size_t i = 0; i < rank; ++i) {
    y_shape[i] = x_shape[static_cast<size_t>(perm[i])];
    strides[i] = x_strides[static_cast<size_t>(perm[i])];
  }
  int64_t inner = y_shape[rank - 1], step = strides[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t at = 0;
  for (size_t out = 0; out < y.size(); out += static_cast<size_t>(inner)) {
    const float* px = x.data() + at;
    float* py = y.data() + out;
    for (int64_t j = 0; j < inner; ++j) {
      py[j] = px[j * step];
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < y_shape[d]) {
        at += strides[d];
        break;
      }
      at -= strides[d] * (y_shape[d] - 1);
      index[d] = 0;
    }
  }
}

void BatchMatMul(std::span<const float> a, std::span<const float> b, int64_t batches, int64_t m,
                 int64_t k, int64_t n, std::span<float> y) {
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t p = 0; p < batches; ++p) {
    const float* pa = a.data() + p * m * k;
    const float* pb = b.data() + p * k * n;
    float* py = y.data() + p * m * n;
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < k; ++kk) {
        double av = pa[i * k + kk];
        const float* brow = pb + kk * n;
        for (int64_t j = 0; j < n; ++j) {
          row[static_cast<size_t>(j)] += av * brow[j];
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        py[i * n + j] = static_cast<float>(row[static_cast<size_t>(j)]);
      }
    }
  }
}

void Slice(std::span<const float> x, const Shape& x_shape, int64_t axis, int64_t start, int64_t end,
           std::span<float> y) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < x_shape.size(); ++i) {
    if (static_cast<int64_t>(i) < axis) {
      outer *= x_shape[i];
    } else if (static_cast<int64_t>(i) > axis) {
      inner *= x_shape[i];
    }
  }
  int64_t dim = x_shape[static_cast<size_t>(axis)], kept = (end - start) * inner;
  for (int64_t o = 0; o < outer; ++o) {
    const float* from = x.data() + (o * dim + start) * inner;
    std::copy(from, from + kept, y.data() + o * kept);
  }
}

void Elementwise(OpKind op, std::span<const float> x, std::span<float> y) {
  switch (op) {
    case OpKind::kSqrt:
      std::transform(x.begin(), x.end(), y.begin(), [](float v) { return std::sqrt(v); });
      break;
    case OpKind::kExp:
      std::transform(x.begin(), x.end(), y.begin(), [](float v) { return std::exp(v); });
      break;
    default:
      std::transform(x.begin(), x.end(), y.begin(), [](float v) { return std::log(v); });
      break;
  }
}

}  // namespace ferry::cpu
