// The tensor ops against element-by-element definitions, on shapes that exercise every
// broadcast pattern, permutation and batch count.
#include "worker/backends/cpu/tensor_ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace ferry::cpu {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) {
    x = u(rng);
  }
  return v;
}

int64_t Count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The element of `shape` (right-aligned into `rank` axes, size-1 axes broadcast) at `index`.
float At(const std::vector<float>& v, const Shape& shape, const std::vector<int64_t>& index) {
  int64_t offset = 0;
  size_t skip = index.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    offset = offset * shape[i] + (shape[i] == 1 ? 0 : index[skip + i]);
  }
  return v[static_cast<size_t>(offset)];
}

std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    index[i] = flat % shape[i];
    flat /= shape[i];
  }
  return index;
}

TEST_CASE("Broadcast: every op, every pattern of size-1 and missing axes, either side") {
  std::mt19937 rng(7);
  struct Case {
    Shape a, b, y;
  };
  std::vector<Case> cases = {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
                             {{2, 3, 4}, {4}, {2, 3, 4}},
                             {{2, 3, 4}, {3, 1}, {2, 3, 4}},
                             {{2, 1, 4}, {2, 3, 1}, {2, 3, 4}},
                             {{2, 4, 1, 5}, {2, 1, 1, 5}, {2, 4, 1, 5}},
                             {{3}, {1}, {3}},
                             {{2, 1, 1, 6}, {2, 4, 6, 6}, {2, 4, 6, 6}}};
  for (OpKind op : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv}) {
    for (const Case& c : cases) {
      std::vector<float> a = Random(static_cast<size_t>(Count(c.a)), rng);
      std::vector<float> b = Random(static_cast<size_t>(Count(c.b)), rng);
      std::vector<float> y(static_cast<size_t>(Count(c.y)));
      Broadcast(op, a, c.a, b, c.b, c.y, y);
      for (int64_t i = 0; i < Count(c.y); ++i) {
        std::vector<int64_t> index = Unravel(i, c.y);
        float x = At(a, c.a, index), z = At(b, c.b, index);
        float want = op == OpKind::kAdd   ? x + z
                     : op == OpKind::kSub ? x - z
                     : op == OpKind::kMul ? x * z
                                          : x / z;
        REQUIRE(y[static_cast<size_t>(i)] == want);
      }
    }
  }
}

TEST_CASE("Transpose: every permutation of four axes that keeps axis 0") {
  std::mt19937 rng(3);
  Shape x_shape = {2, 3, 4, 5};
  std::vector<float> x = Random(120, rng);
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do {
    std::vector<float> y(120);
    Transpose(x, x_shape, perm, y);
    Shape y_shape;
    for (int64_t p : perm) y_shape.push_back(x_shape[static_cast<size_t>(p)]);
    for (int64_t i = 0; i < 120; ++i) {
      std::vector<int64_t> out = Unravel(i, y_shape), in(4);
      for (size_t d = 0; d < 4; ++d) in[static_cast<size_t>(perm[d])] = out[d];
      REQUIRE(y[static_cast<size_t>(i)] == At(x, x_shape, in));
    }
  } while (std::next_permutation(perm.begin() + 1, perm.end()));
}

TEST_CASE("BatchMatMul: each batch entry is its own product") {
  std::mt19937 rng(5);
  int64_t batches = 3, m = 4, k = 5, n = 2;
  std::vector<float> a = Random(60, rng), b = Random(30, rng), y(24);
  BatchMatMul(a, b, batches, m, k, n, y);
  for (int64_t p = 0; p < batches; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t q = 0; q < k; ++q) {
          want += static_cast<double>(a[static_cast<size_t>((p * m + i) * k + q)]) *
                  b[static_cast<size_t>((p * k + q) * n + j)];
        }
        CHECK(y[static_cast<size_t>((p * m + i) * n + j)] == doctest::Approx(want).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("Slice: every range of every axis of a [2, 3, 4] tensor") {
  std::mt19937 rng(11);
  Shape x_shape = {2, 3, 4};
  std::vector<float> x = Random(24, rng);
  for (int64_t axis = 0; axis < 3; ++axis) {
    int64_t dim = x_shape[static_cast<size_t>(axis)];
    for (int64_t start = 0; start < dim; ++start) {
      for (int64_t end = start + 1; end <= dim; ++end) {
        Shape y_shape = x_shape;
        y_shape[static_cast<size_t>(axis)] = end - start;
        std::vector<float> y(static_cast<size_t>(Count(y_shape)), -99.0f);
        Slice(x, x_shape, axis, start, end, y);
        for (int64_t i = 0; i < Count(y_shape); ++i) {
          std::vector<int64_t> index = Unravel(i, y_shape);
          index[static_cast<size_t>(axis)] += start;
          REQUIRE(y[static_cast<size_t>(i)] == At(x, x_shape, index));
        }
      }
    }
  }
}

TEST_CASE("Elementwise: sqrt, exp and log, NaN below their domain") {
  std::vector<float> x = {0.0f, 0.25f, 1.0f, 4.0f, -1.0f}, y(5);
  Elementwise(OpKind::kSqrt, x, y);
  CHECK(std::vector<float>(y.begin(), y.end() - 1) == std::vector<float>{0.0f, 0.5f, 1.0f, 2.0f});
  CHECK(std::isnan(y[4]));
  Elementwise(OpKind::kExp, x, y);
  CHECK(y[0] == 1.0f);
  CHECK(y[2] == doctest::Approx(std::exp(1.0)));
  Elementwise(OpKind::kLog, x, y);
  CHECK(std::isinf(y[0]));
  CHECK(y[3] == doctest::Approx(std::log(4.0)));
  CHECK(std::isnan(y[4]));
}

}  // namespace
}  // namespace ferry::cpu
