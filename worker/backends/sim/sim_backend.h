// SimBackend: spends time by a cost model instead of computing, for end-to-end tests and
// benchmarks of the whole node without a GPU. A dispatch at compiled size s takes table[s]
// if given, else fixed + per_row * s seconds; outputs are zero-filled. Load and job checks are
// the same as a real backend's, so malformed jobs fail here as they would on a GPU.
//
// Thread safety: requires external synchronization (see backend.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "worker/backends/backend.h"

namespace ferry {

struct SimCost {
  double fixed_seconds = 0.0005;
  double per_row_seconds = 0.00005;
  std::map<int64_t, double> table;  // Compiled size -> seconds; overrides the line.

  double Seconds(int64_t batch_size) const;
};

class SimBackend : public Backend {
 public:
  // Spends `seconds` of time; the default sleeps. Tests inject a recorder.
  using Spend = std::function<void(double seconds)>;

  // `costs` by model name; models not named cost `fallback`.
  explicit SimBackend(std::map<std::string, SimCost> costs = {}, SimCost fallback = {},
                      Spend spend = {});

  std::string_view name() const override { return "sim"; }
  Result<ModelHandle> Load(const Bundle& bundle) override;
  Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) override;
  Status ModelStatus(ModelHandle model) const override;
  // Asynchronous like a GPU: Begin notes when the batch will be done by the cost model and
  // returns; the time passes while the caller works (with an injected Spend, Begin runs
  // Execute instead).
  Status Begin(ModelHandle model, const BatchJob& job) override;
  bool Ready() const override;
  Result<ExecutionTiming> Finish() override;
  int64_t ExpectedRemainingNs() const override;

 private:
  std::map<std::string, SimCost> costs_;
  SimCost fallback_;
  Spend spend_;
  std::vector<const Bundle*> models_;
  bool custom_spend_ = false;
  const BatchJob* job_ = nullptr;  // In flight (asynchronous mode).
  int64_t started_ns_ = 0;
  int64_t ready_ns_ = 0;
};

}  // namespace ferry
