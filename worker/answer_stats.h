// Per-model counts of what a worker answered, kept in the terms of Triton's statistics
// extension (successful and failed requests with their times, the execution time each
// successful request waited on, executions per compiled batch size) and published in the
// worker's status (shm::AnswerStatsData), from which a hook host answers /v2/models/stats.
//
// Thread safety: none; the dispatch loop's thread owns it.
#pragma once

#include <cstdint>
#include <vector>

#include "shm/status.h"

namespace ferry::worker {

class AnswerStats {
 public:
  // `batch_sizes`: the model's compiled sizes (its manifest's; {0}: unbatched).
  explicit AnswerStats(std::vector<int64_t> batch_sizes);

  // A request answered OK: its rows, the time since it arrived, and its batch's execution.
  // Negative times (a clock that stepped) count as zero.
  void RecordOk(int64_t rows, int64_t latency_ns, int64_t compute_ns, int64_t unix_ms);
  void RecordFailed(int64_t latency_ns);
  // A batch that ran at compiled size `batch_size` for `compute_ns`.
  void RecordExecution(int64_t batch_size, int64_t compute_ns);

  const shm::AnswerStatsData& data() const { return data_; }

 private:
  std::vector<int64_t> batch_sizes_;
  shm::AnswerStatsData data_{};
};

}  // namespace ferry::worker
