// CudaBackend: runs bundles on one GPU (built when FERRY_CUDA is on).
//
// - Weights live in a device arena per GPU (one cudaMalloc, offsets handed out by an
//   ExtentAllocator), uploaded through a pinned staging buffer.
// - GEMMs go through cuBLAS in the bundle's precision (fp32, TF32, or bf16 weights and
//   activations with fp32 accumulation); every other op is a kernel of ours (kernels.h), a
//   dense op's bias and a following activation fused into one epilogue kernel.
// - Each (variant, compiled size) gets its own device buffers, runs once plainly at load (to
//   load kernels and prove the steps), and is captured as a CUDA graph replayed per dispatch
//   (should capture fail, that executable launches its steps one by one).
// - Inputs are copied host-to-device straight from each request's block (register the
//   shared-memory segment with RegisterHostMemory so those copies run at pinned speed);
//   outputs are copied device-to-host into each request's block. Padding rows are zeroed on
//   the device.
// - Every CUDA and cuBLAS status is checked. An error fails that dispatch with a clear
//   message; a sticky error after which the device no longer synchronises (a lost context)
//   makes healthy() false, and the worker reports unhealthy so the supervisor restarts it.
//
// Device affinity: every entry point makes options.device current on the calling thread
// first (cudaSetDevice is per thread), so Load and Execute may come from any one thread at a
// time, not only the one that called Create.
//
// Copies: a dispatch gathers every request's input rows into the pinned staging buffer with
// host memcpy (padding zeroed there) and moves each input with ONE host-to-device copy, and
// each output back with one device-to-host copy then scattered to the requests' blocks
// (worker/backends/staging.h): a handful of API calls per dispatch whatever the number of requests.
// A batch larger than the staging buffer falls back to 2-D copies per request.
//
// Batches begun with Begin run on the backend's execution thread, three deep
// (ThreadedBackend), so the dispatch loop drains rings and plans while the GPU works. Copies
// and kernels of one batch still share one stream and the thread waits for each batch:
// overlapping batch k+1's copies with batch k's kernels on a second stream is left for a
// session with a GPU to measure.
//
// Thread safety: requires external synchronization (see backend.h); healthy() may be read
// from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "worker/backends/backend.h"
#include "worker/backends/execution_thread.h"
#include "worker/backends/weight_cache.h"

namespace ferry {

struct CudaBackendOptions {
  int device = 0;
  // Device memory for weights. 0: sized at start from the device's free memory, less a reserve
  // for activations, workspaces and the CUDA context (device_plans.h: ArenaBytesFor); what
  // workers use.
  uint64_t weight_arena_bytes = uint64_t{2} << 30;
  uint64_t staging_bytes = 64 << 20;  // Pinned upload buffer.
  bool use_graphs = true;             // false: launch the ops one by one (for the comparison).
  // Convolutions on cuDNN when libcudnn.so.9 loads (cudnn_conv.h); false, or no cuDNN: ferry's
  // direct kernel.
  bool use_cudnn = true;
};

// The number of CUDA devices: 0 when the runtime reports none (cudaErrorNoDevice) or there is
// no driver at all (libcuda.so.1 does not load); UNAVAILABLE naming the error for anything
// else (a driver older than the toolkit, a broken install), so tests fail there instead of
// reporting themselves skipped.
Result<int> CudaDeviceCount();
// True when CudaDeviceCount() finds at least one device.
bool CudaDeviceAvailable();

class CudaBackend : public ThreadedBackend {
 public:
  // UNAVAILABLE when there is no usable device; INTERNAL naming the failing call otherwise.
  static Result<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  Result<ModelHandle> Load(const Bundle& bundle) override;
  Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) override;
  Status ModelStatus(ModelHandle model) const override;
  void Unload(ModelHandle model) override;
  bool Healthy() const override { return healthy(); }
  // Residency (cuda_residency.cc): a released model holds no device memory; a restore uploads
  // its weights on a stream of its own and its next batch builds its executables. WeightBytes
  // counts the weights in the arena (the executables' buffers live outside it, in the reserve).
  bool SupportsResidency() const override;
  uint64_t DefaultWeightBudget() const override;  // The weight arena's capacity.
  uint64_t WeightBytes(ModelHandle model) const override;
  void ReleaseWeights(ModelHandle model) override;
  Status RestoreWeights(ModelHandle model) override;

  // Page-locks host memory (the shared-memory segment) for fast, async copies; undo with
  // UnregisterHostMemory before the memory goes away. Failures never affect health.
  // `read_only`: the memory is mapped read-only (a hook host's arena as a worker maps it),
  // registered with cudaHostRegisterReadOnly (CUDA 11.1+; the device may only read it).
  Status RegisterHostMemory(std::span<uint8_t> memory, bool read_only = false);
  Status UnregisterHostMemory(std::span<uint8_t> memory);
  // False after a sticky CUDA error: the context is lost and the worker must restart.
  bool healthy() const;
  // Times RegisterHostMemory failed (each is logged; copies from that memory then run from
  // pageable memory, synchronously). For the worker's metrics.
  uint64_t host_register_failures() const;
  // Executables whose graph capture or instantiation failed (each is logged); they launch
  // their steps one by one, and TimeProgram(graph = true) refuses them.
  uint64_t graph_fallbacks() const;
  // Convolutions compiled onto cuDNN, and those that fell back to the direct kernel because
  // cuDNN had no algorithm for them or failed its first run (each logged); both 0 without
  // cuDNN.
  uint64_t cudnn_convolutions() const;
  uint64_t cudnn_fallbacks() const;

  // The device weight arena, for a WeightCache; Upload copies host bytes into it through
  // the pinned staging buffer. INVALID_ARGUMENT when [offset, offset + size) leaves the arena.
  WeightArena* weight_arena();
  Status Upload(uint64_t offset, std::span<const uint8_t> bytes);
  Status Download(uint64_t offset, std::span<uint8_t> bytes);

  // Device time of one replay of (variant, size), averaged over `iterations`, with the ops
  // captured as a graph or launched one by one. For benchmarks. UNAVAILABLE for graph = true
  // when that executable has no graph (never reports plain launches as graph times).
  Result<double> TimeProgram(ModelHandle model, int variant, int64_t batch_size, int iterations,
                             bool graph);
  // Seconds spent uploading weights so far (for the upload bandwidth figure).
  double upload_seconds() const;
  uint64_t uploaded_bytes() const;

  struct Impl;

 private:
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
