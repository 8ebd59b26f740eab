// The CUDA kernels' per-element functions (device_math.h) and their plans (device_plans.h),
// run on the host against the CPU reference kernels: the same code the GPU runs, checked
// where no GPU is.
#include "worker/backends/cuda/device_math.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>

#include "model/shape_inference.h"
#include "worker/backends/cpu/imported_ops.h"
#include "worker/backends/cpu/ops.h"
#include "worker/backends/cpu/tensor_ops.h"
#include "worker/backends/cuda/device_plans.h"

namespace ferry::cuda {
namespace {

std::vector<float> Random(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(*NumElements(shape)));
  for (float& x : v) {
    x = normal(rng);
  }
  return v;
}

// Equal up to float accumulation order (the reference sums in double); NaN where NaN.
void CheckClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      CHECK_MESSAGE(std::isnan(got[i]), "element " << i);
      continue;
    }
    CHECK_MESSAGE(std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i])),
                  "element " << i << ": " << got[i] << " against " << want[i]);
  }
}

}  // namespace

TEST_CASE("broadcast views give numpy broadcasting for every binary op") {
  std::mt19937 rng(1);
  struct Case {
    Shape a, b, y;
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
                                         {{2, 3, 4}, {4}, {2, 3, 4}},
                                         {{2, 1, 4}, {3, 1}, {2, 3, 4}},
                                         {{1}, {2, 5}, {2, 5}},
                                         {{2, 4, 1, 8}, {2, 1, 8, 8}, {2, 4, 8, 8}},
                                         {{}, {3}, {3}}}) {
    std::vector<float> a = Random(c.a, rng), b = Random(c.b, rng);
    Result<StridedView> view = BroadcastView(c.a, c.b, c.y);
    REQUIRE(view.ok());
    for (auto [kind, op] : {std::pair{OpKind::kAdd, BinaryOp::kAdd},
                            {OpKind::kSub, BinaryOp::kSub},
                            {OpKind::kMul, BinaryOp::kMul},
                            {OpKind::kDiv, BinaryOp::kDiv}}) {
      std::vector<float> want(static_cast<size_t>(*NumElements(c.y))), got(want.size());
      cpu::Broadcast(kind, a, c.a, b, c.b, c.y, want);
      for (size_t i = 0; i < got.size(); ++i) {
        got[i] = BroadcastAt(*view, op, a.data(), b.data(), static_cast<int64_t>(i));
      }
      CheckClose(got, want);
    }
  }
  CHECK_FALSE(BroadcastView({3}, {4}, {4}).ok());
  CHECK_FALSE(BroadcastView({2, 3}, {3}, {3}).ok());
  CHECK_FALSE(BroadcastView({1}, {1}, Shape(9, 1)).ok());
}

TEST_CASE("transpose views match the reference for every permutation tried") {
  std::mt19937 rng(2);
  Shape x_shape{2, 3, 4, 5};
  std::vector<float> x = Random(x_shape, rng);
  for (const std::vector<int64_t>& perm : std::vector<std::vector<int64_t>>{
           {0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {0, 1, 2, 3}, {1, 3, 0, 2}}) {
    std::vector<float> want(x.size()), got(x.size());
    cpu::Transpose(x, x_shape, perm, want);
    Result<StridedView> view = TransposeView(x_shape, perm);
    REQUIRE(view.ok());
    for (size_t i = 0; i < got.size(); ++i) {
      int64_t from = 0, unused = 0;
      SourceOffsets(*view, static_cast<int64_t>(i), &from, &unused);
      got[i] = x[static_cast<size_t>(from)];
    }
    CheckClose(got, want);
  }
  CHECK_FALSE(TransposeView(x_shape, {0, 1, 1, 2}).ok());
  CHECK_FALSE(TransposeView(x_shape, {0, 1, 2}).ok());
  CHECK_FALSE(TransposeView(x_shape, {0, 1, 2, 4}).ok());
}

TEST_CASE("axis lines match the reductions, log_softmax and arg_max on every axis") {
  std::mt19937 rng(3);
  Shape shape{2, 3, 5};
  std::vector<float> x = Random(shape, rng);
  x[7] = x[12];  // A tie for arg_max's first-or-last rule.
  for (int64_t axis : {1, 2, -1}) {
    AxisSplit s = SplitAround(shape, axis);
    std::vector<float> reduced(static_cast<size_t>(s.outer * s.inner)), want(reduced.size());
    for (auto [kind, op] : {std::pair{OpKind::kReduceMean, AxisOp::kReduceMean},
                            {OpKind::kReduceSum, AxisOp::kReduceSum},
                            {OpKind::kReduceMax, AxisOp::kReduceMax}}) {
      cpu::Reduce(kind, x, shape, axis, want);
      for (int64_t line = 0; line < s.outer * s.inner; ++line) {
        AxisLine(op, x.data(), reduced.data(), s.n, s.inner, line, false);
      }
      CheckClose(reduced, want);
    }
    for (bool last : {false, true}) {
      cpu::ArgMax(x, shape, axis, last, want);
      for (int64_t line = 0; line < s.outer * s.inner; ++line) {
        AxisLine(AxisOp::kArgMax, x.data(), reduced.data(), s.n, s.inner, line, last);
      }
      CheckClose(reduced, want);
    }
    std::vector<float> full(x.size()), full_want(x.size());
    cpu::LogSoftmax(x, shape, axis, full_want);
    for (int64_t line = 0; line < s.outer * s.inner; ++line) {
      AxisLine(AxisOp::kLogSoftmax, x.data(), full.data(), s.n, s.inner, line, false);
    }
    CheckClose(full, full_want);
  }
  // NaN: max propagates it, arg_max picks it.
  std::vector<float> line{1.f, std::numeric_limits<float>::quiet_NaN(), 3.f};
  float out = 0;
  AxisLine(AxisOp::kReduceMax, line.data(), &out, 3, 1, 0, false);
  CHECK(std::isnan(out));
  AxisLine(AxisOp::kArgMax, line.data(), &out, 3, 1, 0, false);
  CHECK(out == 1.f);
}

TEST_CASE("average pooling matches the reference with and without padding counted") {
  std::mt19937 rng(4);
  Shape xs{2, 3, 7, 6};
  std::vector<float> x = Random(xs, rng);
  for (bool count_pad : {false, true}) {
    cpu::Window window{{3, 2}, {2, 2}, {1, 1}};
    Shape ys{2, 3, 4, 4};  // (7 + 2 - 3) / 2 + 1, (6 + 2 - 2) / 2 + 1.
    std::vector<float> want(static_cast<size_t>(*NumElements(ys))), got(want.size());
    cpu::AvgPool2d(x, xs, window, count_pad, ys, want);
    PoolShape s{6, 7, 6, 3, 2, 2, 2, 1, 1, 4, 4};
    for (size_t i = 0; i < got.size(); ++i) {
      got[i] = AvgPoolAt(x.data(), s, count_pad, static_cast<int64_t>(i));
    }
    CheckClose(got, want);
  }
}

TEST_CASE("gather picks table rows and guards ids outside the table") {
  std::mt19937 rng(5);
  std::vector<float> table = Random({5, 3}, rng);
  std::vector<float> ids{0, 4, 2, 2};
  std::vector<float> want(12), got(12);
  REQUIRE(cpu::Gather(ids, table, 5, 3, want).ok());
  for (size_t i = 0; i < got.size(); ++i) {
    got[i] = GatherAt(ids.data(), table.data(), 5, 3, static_cast<int64_t>(i));
  }
  CheckClose(got, want);
  for (float bad : {-1.f, 5.f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> one{bad};
    CHECK(std::isnan(GatherAt(one.data(), table.data(), 5, 3, 1)));
  }
}

TEST_CASE("tensors share an executable's buffer only when their lifetimes do not overlap") {
  // x -> a -> b -> c -> d (relus, 4 KiB each), y = x + d, z = b (an output kept to the end).
  Manifest m;
  m.name = "chain";
  m.inputs = {{"x", DType::kF32, {kBatchDim, 1024}, 0, {}}};
  m.outputs = {{"y", DType::kF32, {kBatchDim, 1024}, 0, {}},
               {"z", DType::kF32, {kBatchDim, 1024}, 0, {}}};
  auto op = [](OpKind kind, std::vector<std::string> in, std::string out) {
    Op o;
    o.kind = kind;
    o.inputs = std::move(in);
    o.output = std::move(out);
    return o;
  };
  m.program = {op(OpKind::kRelu, {"x"}, "a"),     op(OpKind::kRelu, {"a"}, "b"),
               op(OpKind::kRelu, {"b"}, "c"),     op(OpKind::kRelu, {"c"}, "d"),
               op(OpKind::kRelu, {"d"}, "e"),     op(OpKind::kRelu, {"e"}, "f"),
               op(OpKind::kAdd, {"x", "f"}, "y"), op(OpKind::kReshape, {"b"}, "z")};
  std::map<std::string, Shape> shapes;
  for (const char* t : {"x", "a", "b", "c", "d", "e", "f", "y", "z"}) {
    shapes[t] = {1, 1024};
  }
  BufferPlan plan = PlanBuffers(m, shapes, 256);
  REQUIRE(plan.offsets.size() == shapes.size());
  // Live ranges as the plan promises: from the writer (inputs: -1) to one op after the last
  // reader; outputs to the end.
  std::map<std::string, std::pair<int, int>> live = {{"x", {-1, 7}}, {"a", {0, 2}}, {"b", {1, 8}},
                                                     {"c", {2, 4}},  {"d", {3, 5}}, {"e", {4, 6}},
                                                     {"f", {5, 7}},  {"y", {6, 9}}, {"z", {7, 9}}};
  for (const auto& p_live : live) {
    for (const auto& q_live : live) {
      // Named, not structured bindings: CHECK_MESSAGE's lambda takes them.
      const std::string& p = p_live.first;
      const std::string& q = q_live.first;
      const auto& pl = p_live.second;
      const auto& ql = q_live.second;
      bool overlap_in_time = p < q && pl.first <= ql.second && ql.first <= pl.second;
      if (overlap_in_time) {
        uint64_t pa = plan.offsets.at(p), qa = plan.offsets.at(q);
        CHECK_MESSAGE((pa + 4096 <= qa || qa + 4096 <= pa), p << " and " << q << " overlap");
      }
    }
  }
  CHECK(plan.total < shapes.size() * 4096);  // Some bytes were shared.
  CHECK(plan.total % 256 == 0);
}

TEST_CASE("a GPU worker's weight arena leaves a reserve of the device's memory") {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  // An H200 (about 140 GiB, 139 free): a quarter of it stays for activations (every compiled
  // batch size has buffers of its own) and the context.
  CHECK(ArenaBytesFor(139 * kGiB, 140 * kGiB) == 139 * kGiB - 35 * kGiB);
  // A small device: the reserve is at least 2 GiB.
  CHECK(ArenaBytesFor(7 * kGiB, 8 * kGiB) == 5 * kGiB);
  // Little free: half of what is free, never nothing and never more than is free.
  CHECK(ArenaBytesFor(3 * kGiB, 80 * kGiB) == 3 * kGiB / 2);
  CHECK(ArenaBytesFor(1001, 80 * kGiB) == 500 / 256 * 256);
  CHECK(ArenaBytesFor(0, 80 * kGiB) == 0);
  CHECK(ArenaBytesFor(139 * kGiB + 7, 140 * kGiB) % 256 == 0);
}

}  // namespace ferry::cuda
