// CpuBackend: the reference executor. Runs every op of a bundle's program in fp32 (dot
// products accumulated in double), multithreaded over rows and output planes. Its outputs are
// the correctness baseline for the other backends; tests hold it to PyTorch's within 1e-5.
//
// Thread safety: requires external synchronization (see backend.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "worker/backend.h"
#include "worker/cpu/thread_pool.h"

namespace ferry {

class CpuBackend : public Backend {
 public:
  // threads = 0: one per hardware thread.
  explicit CpuBackend(unsigned threads = 0);

  std::string_view name() const override { return "cpu"; }
  Result<ModelHandle> Load(const Bundle& bundle) override;
  Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) override;
  Status ModelStatus(ModelHandle model) const override;

 private:
  struct Model {
    const Bundle* bundle = nullptr;
    std::map<std::string, std::vector<float>> weights;
    // Concrete shapes of every tensor, per (variant, size index).
    std::vector<std::map<std::string, Shape>> shapes;
    std::optional<Error> failure;
  };
  Status RunProgram(const Model& model, const std::map<std::string, Shape>& shapes,
                    std::map<std::string, std::vector<float>>* values);

  std::vector<Model> models_;
  ThreadPool pool_;
};

}  // namespace ferry
