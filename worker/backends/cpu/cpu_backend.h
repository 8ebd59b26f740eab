// CpuBackend: runs bundles on the CPU, in one of two modes.
//   kFast (default): dense and conv2d on oneDNN's JIT kernels with bias and a following
//     activation fused, fp32 accumulation, buffers allocated at load
//     (worker/backends/cpu/fast_program.h). This is what CPU workers (`devices = "cpu:N"`) serve
//     with.
//   kReference: every op in fp32 with dot products accumulated in double
//   (worker/backends/cpu/ops.h).
//     Slow and tight; tests hold every other backend (kFast, CUDA) to it within 1e-5, and it
//     is held to PyTorch's float64 results.
//
// Threads: `threads` intra-op threads per backend (0 = the CPUs this process may run on,
// i.e. its affinity mask, which is the worker's share of the machine when it is pinned; see
// worker/backends/cpu/affinity.h). kFast sets the calling thread's OpenMP thread count before each
// run.
//
// Thread safety: requires external synchronization (see backend.h); Execute runs on the
// caller's thread, Begin's batches on the backend's execution thread (ThreadedBackend).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/backends/backend.h"
#include "worker/backends/cpu/fast_program.h"
#include "worker/backends/cpu/thread_pool.h"
#include "worker/backends/execution_thread.h"

namespace ferry {

enum class CpuMode { kFast, kReference };

struct CpuOptions {
  CpuMode mode = CpuMode::kFast;
  unsigned threads = 0;  // 0: one per CPU in this process's affinity mask.
};

class CpuBackend : public ThreadedBackend {
 public:
  explicit CpuBackend(CpuOptions options = {});
  ~CpuBackend() override { StopExecution(); }

  std::string_view name() const override {
    return options_.mode == CpuMode::kFast ? "cpu" : "cpu-reference";
  }
  Result<ModelHandle> Load(const Bundle& bundle) override;
  Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) override;
  bool RunsOnHostCpus() const override { return true; }
  Status ModelStatus(ModelHandle model) const override;
  void Unload(ModelHandle model) override;
  // Weights are the bundle's tensors converted to fp32 (the packed copies oneDNN's primitives
  // make are not counted); released with the compiled programs, restored from the bundle.
  bool SupportsResidency() const override { return true; }
  uint64_t WeightBytes(ModelHandle model) const override;
  void ReleaseWeights(ModelHandle model) override;
  Status RestoreWeights(ModelHandle model) override;
  unsigned threads() const { return threads_; }

 private:
  struct Model {
    const Bundle* bundle = nullptr;
    std::map<std::string, std::vector<float>> weights;
    // Concrete shapes of every tensor, per (variant, size index).
    std::vector<std::map<std::string, Shape>> shapes;
    // kFast: the compiled program per (variant, size index).
    std::vector<std::unique_ptr<cpu::FastProgram>> programs;
    std::optional<Error> failure;
    bool resident = false;  // weights and programs built.
    uint64_t weight_bytes = 0;
  };
  // Converts the bundle's weights and compiles every (variant, size) into `model`.
  Status BuildWeights(Model& model);
  void FreeWeights(Model& model);
  Status RunReference(const Model& model, const std::map<std::string, Shape>& shapes,
                      std::map<std::string, std::vector<float>>* values);

  CpuOptions options_;
  unsigned threads_;
  std::vector<Model> models_;
  ThreadPool pool_;  // kReference only.
  // Inputs that are not FP32, gathered in their own type before conversion (reused).
  std::vector<uint8_t> scratch_;
};

// Threads for `requested` (0: the CPUs in this process's affinity mask, at least 1).
unsigned CpuThreads(unsigned requested);

}  // namespace ferry
