// For the ONNX tests: imports an ONNX model into a bundle in a temporary directory, runs a
// batch through CpuBackend and compares the answer with a reference, as ONNX's own backend
// test runner does (|got - want| <= atol + rtol * |want|, element by element).
//
// Thread safety: test helpers; one thread.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/bundle.h"
#include "model/dtype_convert.h"
#include "model/onnx/onnx_import.h"
#include "tests/testing/temp_dir.h"
#include "worker/backends/cpu/cpu_backend.h"

namespace ferry::testing {

struct OnnxRun {
  Status status = OkStatus();               // An import, load or execution error.
  bool imported = false;                    // False: the importer refused the model.
  std::vector<std::vector<float>> outputs;  // Per manifest output.
  Manifest manifest;
};

// `values` as the bytes of an input of `dtype`; nullopt for a type the tests do not pack.
inline std::optional<std::vector<uint8_t>> InputBytes(DType dtype,
                                                      const std::vector<float>& values) {
  auto pack = [&](auto zero) {
    std::vector<uint8_t> bytes(values.size() * sizeof(zero));
    for (size_t i = 0; i < values.size(); ++i) {
      auto v = static_cast<decltype(zero)>(values[i]);
      std::memcpy(bytes.data() + i * sizeof(v), &v, sizeof(v));
    }
    return bytes;
  };
  switch (dtype) {
    case DType::kF32:
      return pack(float{});
    case DType::kF64:
      return pack(double{});
    case DType::kI64:
      return pack(int64_t{});
    case DType::kI32:
      return pack(int32_t{});
    default:
      return std::nullopt;
  }
}

// Imports `model` at the single compiled size `rows` and runs `inputs` (one per manifest
// input, `rows` rows each; integer inputs given as exact floats) in `mode`.
inline OnnxRun RunOnnx(const onnx_import::OnnxModel& model, int64_t rows,
                       const std::vector<std::vector<float>>& inputs, CpuMode mode) {
  OnnxRun run;
  Result<onnx_import::ImportedModel> imported =
      onnx_import::ConvertOnnx(model, onnx_import::ImportOptions{"m", {rows}});
  if (!imported.ok()) {
    run.status = imported.error();
    return run;
  }
  run.imported = true;
  TempDir dir;
  std::string path = dir.path() + "/m";
  run.status = onnx_import::WriteBundle(*imported, path);
  if (!run.status.ok()) {
    return run;
  }
  Result<Bundle> bundle = LoadBundle(path);
  if (!bundle.ok()) {
    run.status = bundle.error();
    return run;
  }
  run.manifest = bundle->manifest;
  CpuBackend backend(CpuOptions{mode, 2});
  Result<ModelHandle> handle = backend.Load(*bundle);
  if (!handle.ok()) {
    run.status = handle.error();
    return run;
  }
  RequestIo io{rows, {}, {}};
  std::vector<std::vector<uint8_t>> in_bytes;
  for (size_t i = 0; i < inputs.size() && i < bundle->manifest.inputs.size(); ++i) {
    const TensorSpec& spec = bundle->manifest.inputs[i];
    std::optional<std::vector<uint8_t>> bytes = InputBytes(spec.dtype, inputs[i]);
    // What the hook host refuses with 400 never reaches a worker: refused here the same way.
    for (float v : inputs[i]) {
      if (spec.range &&
          (v < static_cast<float>((*spec.range)[0]) || v > static_cast<float>((*spec.range)[1]))) {
        run.imported = false;
        run.status = InvalidArgument("input '" + spec.name + "': " + std::to_string(v) +
                                     " is outside the declared range (the hook host refuses it)");
        return run;
      }
    }
    if (!bytes) {
      run.imported = false;
      run.status = InvalidArgument("the test feeds no " + std::string(KServeName(spec.dtype)));
      return run;
    }
    in_bytes.push_back(std::move(*bytes));
  }
  for (const std::vector<uint8_t>& bytes : in_bytes) {
    io.inputs.emplace_back(bytes);
  }
  std::vector<std::vector<uint8_t>> out_bytes;
  for (const TensorSpec& spec : bundle->manifest.outputs) {
    int64_t n = 1;
    for (int64_t d : spec.At(rows)) {
      n *= d;
    }
    out_bytes.emplace_back(static_cast<size_t>(n * DTypeBits(spec.dtype) / 8));
  }
  for (std::vector<uint8_t>& bytes : out_bytes) {
    io.outputs.emplace_back(bytes);
  }
  Result<ExecutionTiming> timing = backend.Execute(*handle, BatchJob{0, rows, {io}});
  if (!timing.ok()) {
    run.status = timing.error();
    return run;
  }
  for (size_t o = 0; o < out_bytes.size(); ++o) {  // Each in its declared type, read back.
    DType dtype = bundle->manifest.outputs[o].dtype;
    std::vector<float> values(out_bytes[o].size() / static_cast<size_t>(DTypeBits(dtype) / 8));
    run.status = ConvertToFloat32(dtype, out_bytes[o], values);
    if (!run.status.ok()) {
      return run;
    }
    run.outputs.push_back(std::move(values));
  }
  return run;
}

// The first element outside atol + rtol * |want| ("" when all are within), and the largest
// difference relative to the reference's scale.
inline std::string Compare(const std::vector<float>& got, const std::vector<float>& want,
                           double rtol, double atol, double* relative) {
  double diff = 0, scale = 0;
  std::string first;
  if (got.size() != want.size()) {
    return std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
  }
  for (size_t i = 0; i < want.size(); ++i) {
    double d = std::abs(static_cast<double>(got[i]) - want[i]);
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    if (first.empty() && !(d <= atol + rtol * std::abs(static_cast<double>(want[i])))) {
      first = "element " + std::to_string(i) + ": " + std::to_string(got[i]) + ", expected " +
              std::to_string(want[i]);
    }
  }
  *relative = diff / std::max(scale, 1e-30);
  return first;
}

}  // namespace ferry::testing
