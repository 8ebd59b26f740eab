#include "worker/answer_stats.h"

#include <algorithm>

namespace ferry::worker {
namespace {

uint64_t NonNegative(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }

}  // namespace

AnswerStats::AnswerStats(std::vector<int64_t> batch_sizes) : batch_sizes_(std::move(batch_sizes)) {
  std::sort(batch_sizes_.begin(), batch_sizes_.end());
  for (size_t i = 0; i < batch_sizes_.size() && i < shm::kMaxBatchStats; ++i) {
    // An unbatched model (sizes {0}) runs one request at a time: Triton reports size 1.
    data_.batches[i].batch_size = std::max<int64_t>(batch_sizes_[i], 1);
  }
}

void AnswerStats::RecordOk(int64_t rows, int64_t latency_ns, int64_t compute_ns, int64_t unix_ms) {
  ++data_.ok_requests;
  data_.ok_rows += NonNegative(rows);
  data_.ok_ns += NonNegative(latency_ns);
  data_.compute_ns += NonNegative(compute_ns);
  data_.last_answer_unix_ms = std::max(data_.last_answer_unix_ms, unix_ms);
}

void AnswerStats::RecordFailed(int64_t latency_ns) {
  ++data_.failed_requests;
  data_.failed_ns += NonNegative(latency_ns);
}

void AnswerStats::RecordExecution(int64_t batch_size, int64_t compute_ns) {
  if (batch_sizes_.empty()) {
    return;
  }
  // The smallest compiled size that holds the batch (the size it ran at).
  auto it = std::lower_bound(batch_sizes_.begin(), batch_sizes_.end(), batch_size);
  size_t index = static_cast<size_t>(it - batch_sizes_.begin());
  index = std::min({index, batch_sizes_.size() - 1, shm::kMaxBatchStats - 1});
  shm::BatchStatsData& entry = data_.batches[index];
  ++entry.executions;
  entry.compute_ns += NonNegative(compute_ns);
}

}  // namespace ferry::worker
