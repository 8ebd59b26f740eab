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
  m.inputs = {{"x", DType::kF32, {2, kBatchDim, 3}, 1, {}}};
  m.outputs = {{"y", DType::kF32, {2, kBatchDim, 3}, 1, {}}};
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

TEST_CASE("a tensor that is not FP32 is staged in its own type and converted for the device") {
  Manifest m;
  m.name = "ids";
  m.inputs = {{"ids", DType::kI64, {kBatchDim, 3}, 0, {}}};
  m.outputs = {{"hit", DType::kBool, {kBatchDim, 3}, 0, {}}};
  m.batch_sizes = {4};
  std::map<std::string, Shape> shapes = {{"ids", {4, 3}}, {"hit", {4, 3}}};
  StagingLayout layout = PlanStaging(m, shapes).value();
  const StagingLayout::Tensor& in = layout.inputs[0];
  CHECK(in.bytes == 4 * 3 * 8);
  CHECK(in.row_bytes == 24);
  CHECK(in.device_offset == 256);  // Its FP32 region follows, aligned.
  CHECK(in.device_bytes == 4 * 3 * 4);
  const StagingLayout::Tensor& out = layout.outputs[0];
  CHECK(out.offset == 512);
  CHECK(out.bytes == 12);
  CHECK(out.device_offset == 768);
  CHECK(layout.total_bytes == 1024);

  std::vector<int64_t> a{7, -2, 1 << 20}, b{0, 1, 2, 3, 4, 5};
  std::vector<uint8_t> hit_a(3), hit_b(6);
  auto bytes = [](std::vector<int64_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 8);
  };
  BatchJob job{0, 4, {{1, {bytes(a)}, {hit_a}}, {2, {bytes(b)}, {hit_b}}}};
  std::vector<uint8_t> staging(layout.total_bytes, 0xff);
  GatherInput(layout, job, 0, staging);
  REQUIRE(ConvertStagedInput(layout, 0, staging).ok());
  const auto* device = reinterpret_cast<const float*>(staging.data() + in.device_offset);
  CHECK(device[0] == 7.0f);
  CHECK(device[1] == -2.0f);
  CHECK(device[2] == static_cast<float>(1 << 20));
  CHECK(device[8] == 5.0f);
  CHECK(device[9] == 0.0f);  // The padding row, zeroed before conversion.
  // The device would write y = (x != 0) in FP32.
  auto* result = reinterpret_cast<float*>(staging.data() + out.device_offset);
  for (int i = 0; i < 12; ++i) {
    result[i] = device[i] != 0 ? 0.5f : 0.0f;
  }
  REQUIRE(ConvertStagedOutput(layout, 0, staging).ok());
  ScatterOutput(layout, job, 0, staging);
  CHECK(hit_a == std::vector<uint8_t>{1, 1, 1});
  CHECK(hit_b == std::vector<uint8_t>{0, 1, 1, 1, 1, 1});
}

}  // namespace
}  // namespace ferry
