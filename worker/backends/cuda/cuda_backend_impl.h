// The CUDA backend's inner state (CudaBackend::Impl) and its device-side types, shared by
// cuda_backend.cc (the device, weights, models, the Backend interface) and
// cuda_executables.cc (a program compiled into steps, captured as a CUDA graph, run).
// Internal: included by those two files only.
//
// Threads: as CudaBackend (cuda_backend.h): one execution thread at a time.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "common/extent_allocator.h"
#include "model/dtype_convert.h"
#include "model/shape_inference.h"
#include "worker/backends/cuda/cuda_backend.h"
#include "worker/backends/cuda/cudnn_context.h"
#include "worker/backends/cuda/kernels.h"
#include "worker/backends/staging.h"
#include "worker/scheduler/batch_axis.h"

namespace ferry {

inline constexpr uint64_t kDeviceAlignment = 256;

inline constexpr size_t kCublasWorkspace = 32 << 20;
inline constexpr size_t kLoaderStagingBytes = 8 << 20;  // RestoreWeights' pinned buffer.

// A device tensor of an executable: its buffer and shape.
struct DeviceTensor {
  float* data = nullptr;
  Shape shape;
};

using Step = std::function<Status(cudaStream_t)>;

struct Executable {
  std::map<std::string, DeviceTensor> tensors;
  void* buffer = nullptr;            // Every tensor of this executable, one allocation.
  uint16_t* bf16_scratch = nullptr;  // Activations converted for bf16 GEMMs (in `buffer`).
  std::vector<Step> steps;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  StagingLayout staging;  // Where its inputs and outputs sit in the pinned staging buffer.
};

struct DeviceWeight {
  uint64_t offset = 0;
  bool bf16 = false;
  Shape shape;
};

struct Model {
  const Bundle* bundle = nullptr;
  std::map<std::string, DeviceWeight> weights;
  std::vector<Executable> executables;  // [variant * sizes + size index]
  std::optional<Error> failure;
  // Residency (cuda_residency.cc): weight bytes held in the arena when resident (counted by
  // UploadWeights);
  // released: nothing on the device; needs_build: weights restored, executables built at the
  // next Execute (on the execution thread, which owns the stream and the library handles).
  uint64_t resident_bytes = 0;
  bool released = false;
  bool needs_build = false;
};

class DeviceWeightArena : public WeightArena {
 public:
  DeviceWeightArena(uint8_t* base, uint64_t capacity)
      : base_(base), extents_(capacity / kDeviceAlignment * kDeviceAlignment, kDeviceAlignment) {}
  uint64_t capacity() const override { return extents_.capacity(); }
  // Locked: a restore allocates on the loader thread while the loop's thread frees.
  std::optional<uint64_t> Allocate(uint64_t bytes) override {
    std::lock_guard lock(mu_);
    return extents_.Allocate(bytes);
  }
  void Free(uint64_t offset) override {
    std::lock_guard lock(mu_);
    extents_.Free(offset);
  }
  uint64_t in_use() const override {
    std::lock_guard lock(mu_);
    return extents_.in_use();
  }
  uint8_t* base() const { return base_; }

 private:
  uint8_t* base_;
  mutable std::mutex mu_;
  ExtentAllocator extents_;
};

struct CudaBackend::Impl {
  CudaBackendOptions options;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;
  uint8_t* arena_base = nullptr;
  std::unique_ptr<DeviceWeightArena> arena;
  uint8_t* staging = nullptr;
  std::deque<Model> models;         // Stable references: a restore holds one on the loader thread.
  std::atomic<bool> healthy{true};  // Written on the execution thread, read by the loop.
  double upload_seconds = 0;
  uint64_t uploaded_bytes = 0;
  uint64_t host_register_failures = 0;
  // Counted on the execution thread (a rebuild after a restore) as on the loop's; read by any.
  std::atomic<uint64_t> graph_fallbacks{0};
  std::shared_ptr<cuda::CudnnContext> cudnn;  // Null: convolutions on the direct kernel.
  std::atomic<uint64_t> cudnn_convs{0}, cudnn_fallbacks{0};

  // cudaSetDevice is per thread: every entry point selects the backend's device first.
  Status Select() { return Check(cudaSetDevice(options.device), "select device"); }

  // [offset, offset + bytes) inside the weight arena, overflow-checked.
  Status CheckArenaRange(uint64_t offset, uint64_t bytes, const char* what) const;

  // Frees what a model holds on the device (its executables and weight extents): after a
  // failed Load, so a retry does not leak, at Unload and at the end.
  void Release(Model& m);
  void FreeWeights(Model& m);  // The weight extents only (bookkeeping: no CUDA call).
  // ReleaseWeights' half of Release, for the loop's thread: the weight extents are freed at
  // once (bookkeeping only), the executables retired to be freed by the execution thread at
  // its next batch (FreeRetired), so no CUDA call of the loop's thread can land inside a graph
  // capture on the execution thread or wait on its stream.
  void Retire(Model& m);
  void FreeRetired();
  std::mutex retired_mu;
  std::vector<Executable> retired;

  Status Check(cudaError_t e, const char* what);
  Status Check(cublasStatus_t s, const char* what);

  Status Upload(uint64_t offset, std::span<const uint8_t> bytes);
  // Through `pinned` (pinned_bytes) on `s`, synchronously; `count`: into upload_seconds.
  Status UploadVia(uint64_t offset, std::span<const uint8_t> bytes, cudaStream_t s, uint8_t* pinned,
                   size_t pinned_bytes, bool count);
  // RestoreWeights' own stream and pinned buffer (made at start), so a restore on the loader
  // thread never touches what the execution thread uses.
  cudaStream_t loader_stream = nullptr;
  uint8_t* loader_staging = nullptr;
  Status StartLoader();
  // Every executable of `m` at every variant and compiled size (on the execution thread).
  Status BuildExecutables(Model& m);
  // Before a batch of `m`: UNAVAILABLE when its weights are released; builds its executables
  // when a restore left them to build (a build that fails fails the model).
  Status Resident(Model& m);

  const float* WeightPtr(const Model& m, const std::string& name) const;

  // `loader`: through the loader's stream and buffer (RestoreWeights), else the backend's.
  Status UploadWeights(Model& m, bool loader = false);

  Status BuildExecutable(const Model& m, const ShapeVariant& variant, int64_t size,
                         Executable* exe);

  static uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

  // Translates the program into launch steps, fusing dense + bias + a following activation.
  Status BuildSteps(const Model& m, Executable* exe);
  size_t AddDenseStep(const Model& m, Executable* exe, size_t i,
                      std::map<std::string, int>& readers);
  void AddWindowStep(const Model& m, Executable* exe, const Op& op);
  bool AddPointwiseStep(const Model& m, Executable* exe, const Op& op);
  // cuda_tensor_steps.cc: broadcasting arithmetic, matmul, slice, concat, transpose, gather,
  // the ops along one axis and average pooling.
  Status AddTensorStep(const Model& m, Executable* exe, const Op& op);
  Status AddBinaryStep(const Model& m, Executable* exe, const Op& op);
  void AddMatMulStep(const Model& m, Executable* exe, const Op& op);
  void AddCopyStep(Executable* exe, const Op& op);

  // Moves tensor `index` (an input when to_device, else an output) between every request's
  // block and the device batch `t`, along the tensor's batch axis; pads inputs with zero
  // rows up to the compiled size. A tensor without a batch axis is the first request's.
  Status CopyRows(const BatchJob& job, const Manifest& manifest, const TensorSpec& spec,
                  const DeviceTensor& t, size_t index, bool to_device);

  // One dispatch: inputs in, the program, outputs back, synchronised. Through the pinned
  // staging buffer (one copy per tensor) when the batch fits it, else per request.
  Status Dispatch(const Executable& exe, const Manifest& manifest, const BatchJob& job);

  Status RunSteps(const Executable& exe);

  // Captures the steps as a graph; false on failure, when the partial graph is dropped, the
  // error cleared, and exe->exec stays null (plain launches).
  bool Capture(Executable* exe);

  Status Launch(const Executable& exe, bool graph);
};

}  // namespace ferry
