// Staging through one contiguous buffer (what the CUDA backend copies with one call per
// tensor): gather then scatter gives every request back exactly its rows, for a batch axis
// that is not the first, with padding zeroed.
#include "worker/backends/staging.h"

#include <doctest/doctest.h>

#include <numeric>

namespace ferry {
namespace {

TEST_CASE("staging places inputs then outputs, aligned, and round-trips every request's rows") {
  Manifest m;
  m.name = "m";
  // Batch axis 1 of [2, N, 3]: two blocks of rows per request.
  m.inputs = {{"x", DType::kF32, {2, kBatchDim, 3}, 1}};
  m.outputs = {{"y", DType::kF32, {2, kBatchDim, 3}, 1}};
  m.batch_sizes = {4};
  std::map<std::string, Shape> shapes = {{"x", {2, 4, 3}}, {"y", {2, 4, 3}}};
  StagingLayout layout = PlanStaging(m, shapes).value();
  REQUIRE(layout.inputs.size() == 1);
  CHECK(layout.inputs[0].offset == 0);
  CHECK(layout.inputs[0].bytes == 2 * 4 * 3 * 4);
  CHECK(layout.inputs[0].outer == 2);
  CHECK(layout.inputs[0].row_bytes == 12);
  CHECK(layout.outputs[0].offset == 256);
  CHECK(layout.total_bytes == 512);

  // Request a: 1 row, request b: 2 rows; each [2, rows, 3], values tagged by request.
  std::vector<float> a(2 * 1 * 3), b(2 * 2 * 3);
  std::iota(a.begin(), a.end(), 100.0f);
  std::iota(b.begin(), b.end(), 200.0f);
  std::vector<float> out_a(a.size(), -1), out_b(b.size(), -1);
  auto in = [](std::vector<float>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
  };
  auto out = [](std::vector<float>& v) {
    return std::span<uint8_t>(reinterpret_cast<uint8_t*>(v.data()), v.size() * 4);
  };
  BatchJob job{0, 4, {{1, {in(a)}, {out(out_a)}}, {2, {in(b)}, {out(out_b)}}}};
  std::vector<uint8_t> staging(layout.total_bytes, 0xff);
  GatherInput(layout, job, 0, staging);
  const float* batch = reinterpret_cast<const float*>(staging.data());
  // Block 0: a's row, b's two rows, one zero padding row; then block 1 likewise.
  CHECK(batch[0] == 100.0f);
  CHECK(batch[3] == 200.0f);
  CHECK(batch[6] == 203.0f);
  CHECK(batch[9] == 0.0f);
  CHECK(batch[12] == 103.0f);
  CHECK(batch[15] == 206.0f);
  CHECK(batch[21] == 0.0f);
  // The device would compute y = x: copy the input region to the output region.
  std::copy(staging.begin(), staging.begin() + 96, staging.begin() + 256);
  ScatterOutput(layout, job, 0, staging);
  CHECK(out_a == a);
  CHECK(out_b == b);
}

}  // namespace
}  // namespace ferry
