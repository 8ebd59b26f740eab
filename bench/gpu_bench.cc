// ferry-gpu-bench [--json]: the CUDA backend on the example models, per compiled size:
//   dispatch_us      wall time of one CudaBackend::Execute (inputs H2D from host blocks,
//                    graph replay, outputs D2H, synchronise) -> rows/s;
//   graph_us / plain_us   device time of the program replayed as a CUDA graph vs launched
//                    op by op;
//   host_us          dispatch_us - graph_us: host-side work on the critical path;
//   gemm_only_us     (mlp) the same GEMMs alone captured in one graph: the floor the whole
//                    program is held to (within 1.5x).
// Plus the weight upload bandwidth of mlp-large when present. Needs a GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "worker/backends/cuda/cuda_backend.h"

namespace {

using ferry::Bundle;

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The MLP's GEMMs alone (no bias, no activation), one graph, fp32: the probe's baseline.
// Returns -1 when any CUDA or cuBLAS call fails.
double GemmOnlyGraphUs(const std::vector<std::pair<int, int>>& layers, int batch) {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  std::vector<float*> buffers;
  double result = -1;
  bool ok = cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS &&
            cudaStreamCreate(&stream) == cudaSuccess &&
            cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS &&
            cudaMalloc(&workspace, 32 << 20) == cudaSuccess &&
            cublasSetWorkspace(handle, workspace, 32 << 20) == CUBLAS_STATUS_SUCCESS;
  int widest = batch;
  for (auto [in, out] : layers) {
    widest = std::max({widest, in, out});
  }
  std::vector<float*> weights, activations;
  for (size_t i = 0; ok && i < layers.size() * 2 + 1; ++i) {
    size_t floats = i < layers.size() ? static_cast<size_t>(layers[i].first) * layers[i].second
                                      : static_cast<size_t>(batch) * widest;
    float* p = nullptr;
    ok = cudaMalloc(&p, sizeof(float) * floats) == cudaSuccess &&
         cudaMemset(p, 0, sizeof(float) * floats) == cudaSuccess;
    if (p != nullptr) {
      buffers.push_back(p);
      (i < layers.size() ? weights : activations).push_back(p);
    }
  }
  ok = ok && activations.size() == layers.size() + 1 &&
       cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (ok) {
    const float alpha = 1.f, beta = 0.f;
    for (size_t i = 0; i < layers.size(); ++i) {
      auto [in, out] = layers[i];
      ok = ok &&
           cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &alpha, weights[i], in,
                       activations[i], in, &beta, activations[i + 1], out) == CUBLAS_STATUS_SUCCESS;
    }
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok &&
         cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  }
  ok = ok && cudaEventCreate(&begin) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess;
  if (ok) {
    for (int i = 0; i < 10; ++i) {
      cudaGraphLaunch(exec, stream);
    }
    constexpr int kIterations = 200;
    cudaEventRecord(begin, stream);
    for (int i = 0; i < kIterations; ++i) {
      cudaGraphLaunch(exec, stream);
    }
    cudaEventRecord(end, stream);
    float ms = 0;
    if (cudaEventSynchronize(end) == cudaSuccess &&
        cudaEventElapsedTime(&ms, begin, end) == cudaSuccess) {
      result = ms * 1e3 / kIterations;
    }
  }
  cudaGetLastError();
  for (float* p : buffers) cudaFree(p);
  if (workspace != nullptr) cudaFree(workspace);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (begin != nullptr) cudaEventDestroy(begin);
  if (end != nullptr) cudaEventDestroy(end);
  if (handle != nullptr) cublasDestroy(handle);
  if (stream != nullptr) cudaStreamDestroy(stream);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-gpu-bench: the CUDA backend on the example models"};
  bool json = false;
  int dispatches = 200;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--dispatches", dispatches, "timed dispatches per size");
  CLI11_PARSE(app, argc, argv);
  ferry::Result<int> devices = ferry::CudaDeviceCount();
  if (!devices.ok()) {
    std::fprintf(stderr, "%s\n", devices.error().message.c_str());
    return 1;
  }
  if (*devices == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  ferry::Result<std::unique_ptr<ferry::CudaBackend>> created = ferry::CudaBackend::Create({});
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.error().message.c_str());
    return 1;
  }
  ferry::CudaBackend& gpu = **created;
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json upload;
  for (const char* name : {"mlp", "cnn", "mlp-large"}) {
    std::string dir = std::string("examples/models/") + name;
    if (!std::filesystem::exists(dir)) {
      continue;
    }
    static std::vector<std::unique_ptr<Bundle>> bundles;
    bundles.push_back(std::make_unique<Bundle>(ferry::LoadBundle(dir).value()));
    const Bundle& bundle = *bundles.back();
    double seconds_before = gpu.upload_seconds();
    uint64_t bytes_before = gpu.uploaded_bytes();
    ferry::Result<ferry::ModelHandle> loaded = gpu.Load(bundle);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, loaded.error().message.c_str());
      return 1;
    }
    if (std::string(name) == "mlp-large") {
      double gbps = static_cast<double>(gpu.uploaded_bytes() - bytes_before) /
                    (gpu.upload_seconds() - seconds_before) / 1e9;
      upload = {
          {"model", name}, {"bytes", gpu.uploaded_bytes() - bytes_before}, {"gb_per_s", gbps}};
    }
    const ferry::Manifest& m = bundle.manifest;
    const ferry::ShapeVariant& variant = m.variants[0];
    for (int64_t size : m.batch_sizes) {
      std::vector<std::vector<uint8_t>> inputs, outputs;
      ferry::RequestIo io{size, {}, {}};
      for (const ferry::TensorSpec& t : m.inputs) {
        inputs.emplace_back(static_cast<size_t>(ferry::RowBytes(m, t, variant, true) * size), 0);
        io.inputs.push_back(inputs.back());
      }
      for (const ferry::TensorSpec& t : m.outputs) {
        outputs.emplace_back(static_cast<size_t>(ferry::RowBytes(m, t, variant, false) * size));
        io.outputs.push_back(outputs.back());
      }
      for (auto* group : {&inputs, &outputs}) {
        for (auto& buffer : *group) {
          (void)gpu.RegisterHostMemory(buffer);  // As the worker registers the segment.
        }
      }
      ferry::BatchJob job{0, size, {io}};
      std::vector<double> wall;
      for (int i = 0; i < dispatches + 10; ++i) {
        auto start = std::chrono::steady_clock::now();
        if (!gpu.Execute(*loaded, job).ok()) {
          std::fprintf(stderr, "%s: execute failed\n", name);
          return 1;
        }
        if (i >= 10) {
          wall.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
      }
      for (auto* group : {&inputs, &outputs}) {
        for (auto& buffer : *group) {
          (void)gpu.UnregisterHostMemory(buffer);  // Before the vectors free the pages.
        }
      }
      double dispatch_us = Median(wall) * 1e6;
      double graph_us = gpu.TimeProgram(*loaded, 0, size, 200, true).value() * 1e6;
      double plain_us = gpu.TimeProgram(*loaded, 0, size, 200, false).value() * 1e6;
      nlohmann::json row = {{"model", name},
                            {"batch", size},
                            {"dispatch_us", dispatch_us},
                            {"rows_per_s", size / (dispatch_us / 1e6)},
                            {"graph_us", graph_us},
                            {"plain_us", plain_us},
                            {"host_us", dispatch_us - graph_us}};
      if (std::string(name) == "mlp") {
        double gemm = GemmOnlyGraphUs({{784, 512}, {512, 512}, {512, 10}}, static_cast<int>(size));
        if (gemm > 0) {
          row["gemm_only_us"] = gemm;
          row["dispatch_vs_gemm_only"] = dispatch_us / gemm;
        }
      }
      rows.push_back(row);
    }
  }
  nlohmann::json out = {{"dispatch", rows}, {"upload", upload}};
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-10s %6s %12s %12s %10s %10s %9s %12s\n", "model", "batch", "dispatch us", "rows/s",
              "graph us", "plain us", "host us", "gemm-only us");
  for (const auto& r : rows) {
    std::printf(
        "%-10s %6lld %12.1f %12.0f %10.1f %10.1f %9.1f %12s\n",
        r["model"].get<std::string>().c_str(), r["batch"].get<long long>(),
        r["dispatch_us"].get<double>(), r["rows_per_s"].get<double>(), r["graph_us"].get<double>(),
        r["plain_us"].get<double>(), r["host_us"].get<double>(),
        r.contains("gemm_only_us") ? std::to_string(r["gemm_only_us"].get<double>()).c_str() : "-");
  }
  if (!upload.is_null()) {
    std::printf("weight upload (%s): %.1f GB/s\n", upload["model"].get<std::string>().c_str(),
                upload["gb_per_s"].get<double>());
  }
  return 0;
}
