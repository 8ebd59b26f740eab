// Triton's statistics extension (GET /v2/models[/M[/versions/V]]/stats and the gRPC method
// ModelStatistics) from what the workers publish (shm::AnswerStatsData, with the queue-wait
// counters beside it): a model's numbers are summed over every worker that serves it.
//
// What each field counts (docs/frontend.md, "Statistics"):
//   success / fail       requests answered OK / with an error by a worker, with their time
//                        from the worker draining them to their answer (refusals: 0 ns)
//   queue                requests dispatched, with their time in the worker's queue
//   compute_infer        successful requests, each with its batch's execution time (copies
//                        into and out of the batch included, so compute_input and
//                        compute_output count the same requests with 0 ns)
//   inference_count      batch rows of the successful requests
//   execution_count      batches that ran; batch_stats splits them by compiled size
//   last_inference       milliseconds since the epoch of the last successful answer
//
// Numbers read from a worker's status are untrusted: sums saturate, and entries with an
// impossible batch size are left out. Thread safety: free functions on values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hookhost/frontend/proto/inference.pb.h"
#include "nlohmann/json.hpp"
#include "shm/status.h"

namespace ferry::frontend {

struct StatDuration {
  uint64_t count = 0;
  uint64_t ns = 0;
};

struct BatchStatistics {
  int64_t batch_size = 0;
  StatDuration compute_input, compute_infer, compute_output;
};

struct ModelStatistics {
  std::string name;
  std::string version;
  uint64_t last_inference = 0;
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  StatDuration success, fail, queue, compute_input, compute_infer, compute_output;
  std::vector<BatchStatistics> batch_stats;  // Sizes that ran, ascending.
};

// The statistics of the model key `key` (served as `name` at `version`) summed over the
// workers' statuses (a worker without an entry for `key` adds nothing).
ModelStatistics SumModelStatistics(const std::string& key, const std::string& name,
                                   const std::string& version,
                                   const std::vector<shm::StatusSnapshotData>& workers);

// {"model_stats": [...]} as Triton's HTTP endpoint answers.
nlohmann::json StatisticsJson(const std::vector<ModelStatistics>& stats);
void StatisticsProto(const std::vector<ModelStatistics>& stats,
                     inference::ModelStatisticsResponse* out);

}  // namespace ferry::frontend
