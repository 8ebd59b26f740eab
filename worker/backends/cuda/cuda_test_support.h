// What the CUDA backend's test binaries share: comparing a model's outputs on the GPU with
// the CPU reference backend's, and the main that skips (exit 77) without a device.
// Test-only; included by the cuda_*_test.cc files.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "model/dtype_convert.h"
#include "worker/backends/cuda/cuda_backend.h"

namespace ferry {

// `rows` rows of input `t`: normal FP32 values, or for an integer input uniform integers in
// its declared range (else [0, 9]) in its own type.
inline std::vector<uint8_t> RandomRows(const Manifest& manifest, const TensorSpec& t,
                                       const ShapeVariant& v, int64_t rows, std::mt19937& rng) {
  int element = DTypeBits(t.dtype) / 8;
  auto count = static_cast<size_t>(RowBytes(manifest, t, v, true) / element * rows);
  std::vector<uint8_t> bytes(count * static_cast<size_t>(element));
  if (t.dtype == DType::kF32) {
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < count; ++i) {
      float x = normal(rng);
      std::memcpy(bytes.data() + i * 4, &x, 4);
    }
    return bytes;
  }
  std::array<int64_t, 2> range = t.range.value_or(std::array<int64_t, 2>{0, 9});
  std::uniform_int_distribution<int64_t> pick(range[0], range[1]);
  for (size_t i = 0; i < count; ++i) {
    int64_t x = pick(rng);
    std::memcpy(bytes.data() + i * static_cast<size_t>(element), &x,
                static_cast<size_t>(element));  // Little-endian: the low bytes.
  }
  return bytes;
}

inline double RelativeError(std::span<const uint8_t> got_bytes,
                            std::span<const uint8_t> want_bytes) {
  std::vector<float> got(got_bytes.size() / 4), want(want_bytes.size() / 4);
  std::memcpy(got.data(), got_bytes.data(), got_bytes.size());
  std::memcpy(want.data(), want_bytes.data(), want_bytes.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Runs `job` through both backends and compares every output: FP32 within `tolerance` of
// the output's scale, other types exactly.
inline void Compare(Backend& gpu, ModelHandle g, Backend& cpu, ModelHandle c,
                    const Manifest& manifest, int variant, int64_t size, std::mt19937& rng,
                    double tolerance) {
  const ShapeVariant& v = manifest.variants[static_cast<size_t>(variant)];
  int64_t rows = std::max<int64_t>(1, size - 1);  // Leave a padding row when we can.
  std::vector<std::vector<uint8_t>> inputs, gpu_out, cpu_out;
  for (const TensorSpec& t : manifest.inputs) {
    inputs.push_back(RandomRows(manifest, t, v, rows, rng));
  }
  for (const TensorSpec& t : manifest.outputs) {
    gpu_out.emplace_back(static_cast<size_t>(RowBytes(manifest, t, v, false) * rows));
    cpu_out.emplace_back(gpu_out.back().size());
  }
  // Two requests (1 row, then the rest) when there are rows enough: coalescing on the GPU.
  auto job = [&](std::vector<std::vector<uint8_t>>& outs) {
    BatchJob j{variant, size, {}};
    for (int64_t begin = 0; begin < rows;) {
      int64_t n = begin == 0 && rows > 1 ? 1 : rows - begin;
      RequestIo io{n, {}, {}};
      for (size_t i = 0; i < inputs.size(); ++i) {
        size_t row = inputs[i].size() / static_cast<size_t>(rows);
        io.inputs.push_back(std::span<const uint8_t>(inputs[i]).subspan(begin * row, n * row));
      }
      for (auto& out : outs) {
        size_t row = out.size() / static_cast<size_t>(rows);
        io.outputs.push_back(std::span<uint8_t>(out).subspan(begin * row, n * row));
      }
      j.requests.push_back(io);
      begin += n;
    }
    return j;
  };
  Result<ExecutionTiming> on_gpu = gpu.Execute(g, job(gpu_out));
  REQUIRE_MESSAGE(on_gpu.ok(), (on_gpu.ok() ? "" : on_gpu.error().message));
  REQUIRE(cpu.Execute(c, job(cpu_out)).ok());
  for (size_t o = 0; o < gpu_out.size(); ++o) {
    if (manifest.outputs[o].dtype != DType::kF32) {  // Integers, BOOL: exactly.
      CHECK_MESSAGE(gpu_out[o] == cpu_out[o],
                    manifest.name << " size " << size << ": output " << manifest.outputs[o].name);
      continue;
    }
    double error = RelativeError(gpu_out[o], cpu_out[o]);
    CHECK_MESSAGE(error <= tolerance, manifest.name << " variant " << variant << " size " << size
                                                    << ": relative error " << error);
  }
}

inline int RunGpuTests(int argc, char** argv) {
  // Skipped only when the runtime reports no device; any other error (a driver older than
  // the toolkit, say) fails the test rather than hiding as a skip.
  Result<int> devices = CudaDeviceCount();
  if (!devices.ok()) {
    std::printf("%s\n", devices.error().message.c_str());
    return 1;
  }
  if (*devices == 0) {
    std::printf("no CUDA device: the CUDA backend tests are skipped\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace ferry
