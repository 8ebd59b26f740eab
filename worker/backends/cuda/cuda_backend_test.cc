// CUDA backend tests. Without a CUDA device the binary exits 77 and CTest reports the test
// skipped (SKIP_RETURN_CODE), never passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include "worker/backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "shm/segment.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/cuda/cuda_test_support.h"
#include "worker/backends/cuda/kernels.h"

namespace ferry {
namespace {

TEST_CASE("every example model matches the CPU backend at every size and variant") {
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE_MESSAGE(gpu.ok(), (gpu.ok() ? "" : gpu.error().message));
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});  // The reference every backend meets.
  std::mt19937 rng(42);
  for (const char* name : {"mlp", "cnn", "mlp-large"}) {
    std::string dir = std::string("examples/models/") + name;
    if (!std::filesystem::exists(dir)) {
      MESSAGE(dir << " absent (scripts/make_examples.py --large writes it)");
      continue;
    }
    Bundle bundle = LoadBundle(dir).value();
    ModelHandle g = (*gpu)->Load(bundle).value();
    ModelHandle c = cpu.Load(bundle).value();
    // fp32 GEMMs: accumulation order only; bf16: 8 bits of mantissa.
    double tolerance = bundle.manifest.precision == Precision::kBf16 ? 3e-2 : 1e-4;
    for (size_t v = 0; v < bundle.manifest.variants.size(); ++v) {
      for (int64_t size : bundle.manifest.batch_sizes) {
        if (std::string(name) == "mlp-large" && size > 32) {
          continue;  // The CPU reference would take minutes.
        }
        Compare(**gpu, g, cpu, c, bundle.manifest, static_cast<int>(v), size, rng, tolerance);
      }
    }
  }
  CHECK((*gpu)->healthy());
}

TEST_CASE("a depthwise and a grouped conv2d with clip match the CPU backend") {
  // x [N, 4, 6, 6] -> conv2d groups 4 (depthwise 3x3) -> clip [0, 6] -> conv2d groups 2 -> y.
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ferry-cuda-groups-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "grouped");
  std::ofstream(dir / "grouped" / "manifest.toml") << R"(name = "grouped"
[[inputs]]
name = "x"
shape = [-1, 4, 6, 6]
[[outputs]]
name = "y"
shape = [-1, 6, 6, 6]
[batching]
sizes = [1, 4]
[[program]]
op = "conv2d"
input = "x"
output = "d"
weight = "dw"
bias = "db"
padding = 1
groups = 4
[[program]]
op = "clip"
input = "d"
output = "c"
min = 0.0
max = 6.0
[[program]]
op = "conv2d"
input = "c"
output = "y"
weight = "gw"
groups = 2
)";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> values(36 + 4 + 12);  // dw [4, 1, 3, 3], db [4], gw [6, 2, 1, 1].
  for (float& v : values) {
    v = normal(rng);
  }
  std::string header = R"({"dw":{"dtype":"F32","shape":[4,1,3,3],"data_offsets":[0,144]},)"
                       R"("db":{"dtype":"F32","shape":[4],"data_offsets":[144,160]},)"
                       R"("gw":{"dtype":"F32","shape":[6,2,1,1],"data_offsets":[160,208]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream weights(dir / "grouped" / "weights.safetensors", std::ios::binary);
  uint64_t length = header.size();
  weights.write(reinterpret_cast<const char*>(&length), 8);
  weights << header;
  weights.write(reinterpret_cast<const char*>(values.data()),
                static_cast<std::streamsize>(values.size() * 4));
  weights.close();
  Result<Bundle> bundle = LoadBundle((dir / "grouped").string());
  std::filesystem::remove_all(dir);
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE_MESSAGE(gpu.ok(), (gpu.ok() ? "" : gpu.error().message));
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});
  ModelHandle g = (*gpu)->Load(*bundle).value();
  ModelHandle c = cpu.Load(*bundle).value();
  for (int64_t size : bundle->manifest.batch_sizes) {
    Compare(**gpu, g, cpu, c, bundle->manifest, 0, size, rng, 1e-5);
  }
}

TEST_CASE("the piecewise activations, sqrt, exp and log match the CPU backend") {
  // x [N, 8] -> leaky_relu -> hard_swish -> hard_sigmoid -> exp -> sqrt -> log -> y.
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ferry-cuda-pointwise-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "pointwise");
  std::string manifest = R"(name = "pointwise"
[[inputs]]
name = "x"
shape = [-1, 8]
[[outputs]]
name = "y"
shape = [-1, 8]
[batching]
sizes = [1, 4]
)";
  const char* ops[][3] = {{"leaky_relu", "x", "alpha = 0.1"},
                          {"hard_swish", "a", ""},
                          {"hard_sigmoid", "b", "alpha = 0.2\nbeta = 0.5"},
                          {"exp", "c", ""},
                          {"sqrt", "d", ""},
                          {"log", "e", ""}};
  const char* outputs[] = {"a", "b", "c", "d", "e", "y"};
  for (int i = 0; i < 6; ++i) {
    manifest += std::string("[[program]]\nop = \"") + ops[i][0] + "\"\ninput = \"" + ops[i][1] +
                "\"\noutput = \"" + outputs[i] + "\"\n" + ops[i][2] + "\n";
  }
  std::ofstream(dir / "pointwise" / "manifest.toml") << manifest;
  std::ofstream weights(dir / "pointwise" / "weights.safetensors", std::ios::binary);
  uint64_t length = 8;
  weights.write(reinterpret_cast<const char*>(&length), 8);
  weights << "{}      ";
  weights.close();
  Result<Bundle> bundle = LoadBundle((dir / "pointwise").string());
  std::filesystem::remove_all(dir);
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE_MESSAGE(gpu.ok(), (gpu.ok() ? "" : gpu.error().message));
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});
  ModelHandle g = (*gpu)->Load(*bundle).value();
  ModelHandle c = cpu.Load(*bundle).value();
  std::mt19937 rng(11);
  for (int64_t size : bundle->manifest.batch_sizes) {
    Compare(**gpu, g, cpu, c, bundle->manifest, 0, size, rng, 1e-5);
  }
}

TEST_CASE("graph replay and plain launches give the same outputs") {
  CudaBackendOptions plain;
  plain.use_graphs = false;
  Result<std::unique_ptr<CudaBackend>> graphs = CudaBackend::Create({});
  Result<std::unique_ptr<CudaBackend>> launches = CudaBackend::Create(plain);
  REQUIRE(graphs.ok());
  REQUIRE(launches.ok());
  Bundle bundle = LoadBundle("examples/models/cnn").value();
  ModelHandle a = (*graphs)->Load(bundle).value();
  ModelHandle b = (*launches)->Load(bundle).value();
  std::mt19937 rng(7);
  Compare(**graphs, a, **launches, b, bundle.manifest, 0, 4, rng, 1e-6);
  CHECK((*graphs)->TimeProgram(a, 0, 4, 10, true).ok());
}

TEST_CASE("convolutions on cuDNN match ferry's direct kernel") {
  CudaBackendOptions direct;
  direct.use_cudnn = false;
  Result<std::unique_ptr<CudaBackend>> with = CudaBackend::Create({});
  Result<std::unique_ptr<CudaBackend>> without = CudaBackend::Create(direct);
  REQUIRE(with.ok());
  REQUIRE(without.ok());
  Bundle bundle = LoadBundle("examples/models/cnn").value();
  ModelHandle a = (*with)->Load(bundle).value();
  ModelHandle b = (*without)->Load(bundle).value();
  CHECK((*without)->cudnn_convolutions() == 0);
  if ((*with)->cudnn_convolutions() + (*with)->cudnn_fallbacks() == 0) {
    MESSAGE("libcudnn.so.9 did not load here: both ran the direct kernel");
  } else {
    CHECK((*with)->cudnn_fallbacks() == 0);  // cuDNN ran every convolution of the CNN.
  }
  std::mt19937 rng(9);
  for (int64_t size : bundle.manifest.batch_sizes) {
    Compare(**with, a, **without, b, bundle.manifest, 0, size, rng, 1e-5);
  }
}

TEST_CASE("a model's weights released from the GPU and restored serve the same answers") {
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE(gpu.ok());
  CudaBackend& backend = **gpu;
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});
  Bundle bundle = LoadBundle("examples/models/cnn").value();
  ModelHandle g = backend.Load(bundle).value();
  ModelHandle c = cpu.Load(bundle).value();
  REQUIRE(backend.SupportsResidency());
  uint64_t held = backend.weight_arena()->in_use();
  CHECK(held > 0);
  CHECK(backend.WeightBytes(g) == held);  // The weights in the arena, aligned as allocated.
  CHECK(backend.DefaultWeightBudget() == backend.weight_arena()->capacity());
  std::mt19937 rng(5);
  Compare(backend, g, cpu, c, bundle.manifest, 0, 4, rng, 1e-5);

  backend.ReleaseWeights(g);
  CHECK(backend.weight_arena()->in_use() == 0);
  std::vector<uint8_t> in(static_cast<size_t>(
      RowBytes(bundle.manifest, bundle.manifest.inputs[0], bundle.manifest.variants[0], true)));
  std::vector<uint8_t> out(static_cast<size_t>(
      RowBytes(bundle.manifest, bundle.manifest.outputs[0], bundle.manifest.variants[0], false)));
  BatchJob job{0, 1, {RequestIo{1, {in}, {out}}}};
  Result<ExecutionTiming> cold = backend.Execute(g, job);
  REQUIRE_FALSE(cold.ok());
  CHECK(cold.error().code == ErrorCode::kUnavailable);

  // Restored on a thread of its own, as the worker's loader does.
  Status restored = OkStatus();
  std::thread([&] { restored = backend.RestoreWeights(g); }).join();
  REQUIRE_MESSAGE(restored.ok(), (restored.ok() ? "" : restored.error().message));
  CHECK(backend.weight_arena()->in_use() == held);
  for (int64_t size : bundle.manifest.batch_sizes) {
    Compare(backend, g, cpu, c, bundle.manifest, 0, size, rng, 1e-5);
  }
  CHECK(backend.healthy());
}

TEST_CASE("the weight cache loads, evicts and compacts real device memory") {
  CudaBackendOptions options;
  options.weight_arena_bytes = 64 << 20;
  Result<std::unique_ptr<CudaBackend>> created = CudaBackend::Create(options);
  REQUIRE(created.ok());
  CudaBackend& gpu = **created;
  WeightCache cache(gpu.weight_arena(), ResidencyMode::kManaged, 0);
  constexpr uint64_t kBytes = 24 << 20;  // Two fit, three do not.
  std::vector<std::vector<uint8_t>> blobs;
  for (int i = 0; i < 3; ++i) {
    blobs.emplace_back(kBytes, static_cast<uint8_t>(0x10 + i));
    cache.Register(i, "m" + std::to_string(i), kBytes, Residency::kOnDemand,
                   [&gpu, &blobs, i](uint64_t offset) { return gpu.Upload(offset, blobs[i]); });
  }
  auto resident_bytes_ok = [&](int i) {
    std::vector<uint8_t> back(kBytes);
    REQUIRE(gpu.Download(cache.offset(i), back).ok());
    return back == blobs[static_cast<size_t>(i)];
  };
  REQUIRE(cache.Acquire(0).ok());
  REQUIRE(cache.Acquire(1).ok());
  CHECK(resident_bytes_ok(0));
  REQUIRE(cache.Acquire(2).ok());  // Evicts 0, the least recently used.
  CHECK_FALSE(cache.resident(0));
  CHECK(resident_bytes_ok(1));
  CHECK(resident_bytes_ok(2));
  REQUIRE(cache.Compact({2, 1}).ok());
  CHECK(resident_bytes_ok(1));
  CHECK(resident_bytes_ok(2));
  CHECK(cache.stats().compactions == 1);
  CHECK(gpu.uploaded_bytes() >= 5 * kBytes);
}

TEST_CASE("malformed jobs fail cleanly and leave the backend healthy") {
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE(gpu.ok());
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  ModelHandle mlp = (*gpu)->Load(bundle).value();
  std::vector<uint8_t> input(10), output(40);
  CHECK((*gpu)->Execute(mlp, BatchJob{0, 1, {{1, {input}, {output}}}}).error().code ==
        ErrorCode::kInvalidArgument);
  CHECK((*gpu)->healthy());
}

TEST_CASE("a dispatch from another thread than Create's runs on the backend's device") {
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE(gpu.ok());
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});
  ModelHandle c = cpu.Load(bundle).value();
  ModelHandle g = -1;
  std::thread loader([&] { g = (*gpu)->Load(bundle).value(); });
  loader.join();
  std::mt19937 rng(3);
  std::thread runner([&] { Compare(**gpu, g, cpu, c, bundle.manifest, 0, 8, rng, 1e-4); });
  runner.join();
  CHECK((*gpu)->graph_fallbacks() == 0);
}

TEST_CASE("a hook host's arena, mapped read-only, registers read-only and feeds the copies") {
  // The worker's view of a hook host's partition is a read-only mapping (shm/segment.h):
  // cudaHostRegister accepts it only with cudaHostRegisterReadOnly.
  std::string name = "ferry-test-cuda-" + std::to_string(getpid());
  shm::Segment supervisor = shm::Segment::Create(name, {1, 1, 16, 32 << 20}).value();
  shm::Segment worker = shm::Segment::Attach(name, 1).value();
  REQUIRE_FALSE(worker.IsWritable(0));
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE(gpu.ok());
  std::span<uint8_t> inputs = worker.partition(0);
  std::span<uint8_t> outputs = worker.partition(1);
  cudaError_t plain = cudaHostRegister(inputs.data(), inputs.size(), cudaHostRegisterDefault);
  WARN_MESSAGE(plain != cudaSuccess, "a read-only mapping registered without the flag");
  if (plain == cudaSuccess) {
    cudaHostUnregister(inputs.data());
  }
  cudaGetLastError();
  REQUIRE((*gpu)->RegisterHostMemory(inputs, true).ok());
  REQUIRE((*gpu)->RegisterHostMemory(outputs, false).ok());
  CHECK((*gpu)->host_register_failures() == 0);

  Bundle bundle = LoadBundle("examples/models/mlp").value();
  ModelHandle g = (*gpu)->Load(bundle).value();
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});
  ModelHandle c = cpu.Load(bundle).value();
  constexpr int64_t kRows = 5;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> values(kRows * 784);
  for (float& x : values) {
    x = normal(rng);
  }
  // The hook host writes its tensor (through the supervisor's writable view here).
  std::memcpy(supervisor.partition(0).data(), values.data(), values.size() * 4);
  std::vector<uint8_t> want(kRows * 10 * 4);
  std::span<const uint8_t> in = inputs.subspan(0, values.size() * 4);
  std::span<uint8_t> out = outputs.subspan(0, want.size());
  REQUIRE((*gpu)->Execute(g, BatchJob{0, 8, {{kRows, {in}, {out}}}}).ok());
  REQUIRE(cpu.Execute(c, BatchJob{0, 8, {{kRows, {in}, {want}}}}).ok());
  CHECK(RelativeError(out, want) <= 1e-4);
  CHECK((*gpu)->UnregisterHostMemory(inputs).ok());
  CHECK((*gpu)->UnregisterHostMemory(outputs).ok());
  shm::Segment::Remove(name);
}

TEST_CASE("a failed load frees its device memory, on every retry") {
  CudaBackendOptions options;
  options.weight_arena_bytes = 1 << 20;  // The MLP's 1.6 MB of weights cannot fit.
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create(options);
  REQUIRE(gpu.ok());
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<ModelHandle> loaded = (*gpu)->Load(bundle);
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().code == ErrorCode::kResourceExhausted);
    CHECK((*gpu)->weight_arena()->in_use() == 0);
  }
  CHECK((*gpu)->healthy());
}

TEST_CASE("Upload and Download refuse ranges outside the weight arena") {
  CudaBackendOptions options;
  options.weight_arena_bytes = 1 << 20;
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create(options);
  REQUIRE(gpu.ok());
  std::vector<uint8_t> bytes(4096);
  CHECK((*gpu)->Upload(0, bytes).ok());
  CHECK((*gpu)->Upload((1 << 20) - 4096, bytes).ok());  // Ends exactly at the arena's end.
  CHECK((*gpu)->Upload((1 << 20) - 4095, bytes).error().code == ErrorCode::kInvalidArgument);
  CHECK((*gpu)->Download(UINT64_MAX - 10, bytes).error().code == ErrorCode::kInvalidArgument);
  CHECK((*gpu)->healthy());
}

TEST_CASE("graph timing is refused for an executable that has no graph") {
  CudaBackendOptions plain;
  plain.use_graphs = false;
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create(plain);
  REQUIRE(gpu.ok());
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  ModelHandle mlp = (*gpu)->Load(bundle).value();
  CHECK((*gpu)->TimeProgram(mlp, 0, 8, 10, false).ok());
  CHECK((*gpu)->TimeProgram(mlp, 0, 8, 10, true).error().code == ErrorCode::kUnavailable);
}

TEST_CASE("softmax and global average pooling compute every line past the grid's cap") {
  // Blocks() caps the grid at 65535 * 16 blocks of 256 threads: 268,435,456 lines.
  constexpr int64_t kLines = int64_t{65535} * 16 * 256 + 1000;
  float *x = nullptr, *y = nullptr;
  REQUIRE(cudaMalloc(&x, kLines * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&y, kLines * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(x, 0, kLines * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(y, 0, kLines * sizeof(float)) == cudaSuccess);
  // Softmax over n = 1: every output is exactly 1.
  REQUIRE(cuda::Softmax(x, y, kLines, 1, 1, nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  float last = 0;
  REQUIRE(cudaMemcpy(&last, y + kLines - 1, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(last == 1.0f);
  // Average pool of area 1 over planes filled with 2: the last plane is 2.
  std::vector<float> twos(1024, 2.0f);
  REQUIRE(cudaMemcpy(x + kLines - 1024, twos.data(), 4096, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cuda::GlobalAvgPool(x, y, kLines, 1, nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(&last, y + kLines - 1, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(last == 2.0f);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) { return ferry::RunGpuTests(argc, argv); }
