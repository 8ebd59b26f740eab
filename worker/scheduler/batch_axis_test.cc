#include "worker/scheduler/batch_axis.h"

#include <doctest/doctest.h>

#include <cstring>

#include "worker/scheduler/request_splitting.h"

namespace ferry {
namespace {

Bytes Floats(std::vector<float> values) {
  Bytes out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<float> AsFloats(const Bytes& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

Dispatch TwoRequests(int64_t rows_a, int64_t rows_b, int64_t batch_size) {
  Dispatch d;
  d.model = 0;
  d.requests.resize(2);
  d.requests[0].rows = rows_a;
  d.requests[1].rows = rows_b;
  d.rows = rows_a + rows_b;
  d.batch_size = batch_size;
  return d;
}

TEST_CASE("row layout splits a shape around its batch axis") {
  RowLayout axis0 = RowLayoutOf({4, 3, 2}, 0, 4).value();
  CHECK(axis0.outer == 1);
  CHECK(axis0.row_bytes == 24);
  RowLayout axis1 = RowLayoutOf({2, 4, 3}, 1, 4).value();
  CHECK(axis1.outer == 2);
  CHECK(axis1.row_bytes == 12);
  CHECK_FALSE(RowLayoutOf({2}, 1, 4).ok());
  CHECK_FALSE(RowLayoutOf({2, int64_t{1} << 62, int64_t{1} << 62}, 0, 4).ok());
}

TEST_CASE("coalesced inputs are concatenated and padded with zero rows") {
  Dispatch d = TwoRequests(1, 2, 4);
  RowLayout layout{1, 8};  // [rows, 2] floats.
  Bytes a = Floats({1, 2});
  Bytes b = Floats({3, 4, 5, 6});
  std::vector<ByteView> parts = {a, b};
  BatchInput input = AssembleInput(d, parts, layout);
  CHECK(AsFloats(input.storage) == std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0});
  CHECK(input.view.data() == input.storage.data());
}

TEST_CASE("a batch axis other than 0 interleaves correctly") {
  // Tensors [2, rows] (axis 1): a = [[1],[2]], b = [[3],[4]] -> [[1,3],[2,4]].
  Dispatch d = TwoRequests(1, 1, 2);
  RowLayout layout = RowLayoutOf({2, 1}, 1, 4).value();
  Bytes a = Floats({1, 2});
  Bytes b = Floats({3, 4});
  std::vector<ByteView> parts = {a, b};
  BatchInput input = AssembleInput(d, parts, layout);
  CHECK(AsFloats(input.storage) == std::vector<float>{1, 3, 2, 4});
  std::vector<Bytes> back = ScatterOutput(d, input.view, layout);
  CHECK(AsFloats(back[0]) == std::vector<float>{1, 2});
  CHECK(AsFloats(back[1]) == std::vector<float>{3, 4});
}

TEST_CASE("a lone request that fills the dispatch is passed through without a copy") {
  Dispatch d;
  d.model = 0;
  d.requests.resize(1);
  d.requests[0].rows = 2;
  d.rows = 2;
  d.batch_size = 2;
  d.pass_through = true;
  Bytes a = Floats({1, 2, 3, 4});
  std::vector<ByteView> parts = {a};
  BatchInput input = AssembleInput(d, parts, RowLayout{1, 8});
  CHECK(input.view.data() == a.data());
  CHECK(input.storage.empty());
}

TEST_CASE("an unbatched dispatch passes its one request through both ways") {
  Dispatch d;
  d.model = 0;
  d.requests.resize(1);
  d.rows = 1;
  d.batch_size = 0;
  d.pass_through = true;
  Bytes a = Floats({1, 2, 3});
  std::vector<ByteView> parts = {a};
  CHECK(AssembleInput(d, parts, RowLayout{1, 12}).view.data() == a.data());
  std::vector<Bytes> out = ScatterOutput(d, a, RowLayout{1, 12});
  REQUIRE(out.size() == 1);
  CHECK(out[0] == a);
}

TEST_CASE("outputs are sliced per caller and padding rows dropped") {
  Dispatch d = TwoRequests(1, 2, 4);
  Bytes out = Floats({10, 20, 30, 99});  // [4, 1]; the last row is padding.
  std::vector<Bytes> slices = ScatterOutput(d, out, RowLayout{1, 4});
  REQUIRE(slices.size() == 2);
  CHECK(AsFloats(slices[0]) == std::vector<float>{10});
  CHECK(AsFloats(slices[1]) == std::vector<float>{20, 30});
}

TEST_CASE("an oversize request splits into pieces of the largest size and joins back") {
  CHECK(PlanSplit("m", 70, 32, "", 256).value() == std::vector<int64_t>{32, 32, 6});
  CHECK(PlanSplit("m", 32, 32, "", 256).value() == std::vector<int64_t>{32});
  CHECK(PlanSplit("m", 70, 0, "", 256).value() == std::vector<int64_t>{70});  // Unbatched.
  // One behaviour for a request that must be split and cannot: refused, never run whole.
  Result<std::vector<int64_t>> kept =
      PlanSplit("m", 70, 32, "its preprocess does not keep rows", 256);
  REQUIRE_FALSE(kept.ok());
  CHECK(kept.error().message ==
        "model 'm': 70 rows exceed the largest compiled batch size 32, and its preprocess does "
        "not keep rows, so it cannot be split");
  CHECK(PlanSplit("m", 32, 32, "its preprocess does not keep rows", 256).ok());  // Fits whole.
  CHECK(PlanSplit("m", 64, 32, "", 2).ok());
  CHECK_FALSE(PlanSplit("m", 65, 32, "", 2).ok());  // Three pieces, two allowed.
  QueuedRequest whole;
  whole.rows = 5;
  whole.deadline = 123;
  whole.arrival = 7;
  std::vector<int64_t> pieces = PlanSplit("m", 5, 2, "", 256).value();
  std::vector<QueuedRequest> split = SplitRequest(whole, pieces);
  REQUIRE(split.size() == 3);
  for (const QueuedRequest& piece : split) {
    CHECK(piece.deadline == 123);  // The whole request's deadline rides on every piece.
    CHECK(piece.arrival == 7);
  }
  CHECK(split[2].rows == 1);
  Bytes tensor = Floats({0, 1, 2, 3, 4});
  std::vector<Bytes> parts = SplitTensor(tensor, pieces, RowLayout{1, 4});
  CHECK(AsFloats(parts[1]) == std::vector<float>{2, 3});
  CHECK(JoinPieces(parts, pieces, RowLayout{1, 4}) == tensor);
}

}  // namespace
}  // namespace ferry
