#include "hookhost/frontend/model_statistics.h"

#include <cstring>
#include <limits>
#include <map>

namespace ferry::frontend {
namespace {

void Add(uint64_t& sum, uint64_t value) {
  sum = value > std::numeric_limits<uint64_t>::max() - sum ? std::numeric_limits<uint64_t>::max()
                                                           : sum + value;
}

void Add(StatDuration& d, uint64_t count, uint64_t ns) {
  Add(d.count, count);
  Add(d.ns, ns);
}

const shm::ModelStatusData* EntryFor(const shm::StatusSnapshotData& worker,
                                     const std::string& name) {
  uint32_t n = std::min(worker.num_models, shm::kMaxStatusModels);
  for (uint32_t m = 0; m < n; ++m) {
    const shm::ModelStatusData& entry = worker.models[m];
    if (entry.state != static_cast<uint32_t>(shm::ModelLoadState::kUnloaded) &&
        std::string_view(entry.name, strnlen(entry.name, sizeof(entry.name))) == name) {
      return &entry;
    }
  }
  return nullptr;
}

void AddWorker(const shm::ModelStatusData& entry, ModelStatistics& s,
               std::map<int64_t, StatDuration>& batches) {
  const shm::AnswerStatsData& a = entry.answers;
  Add(s.success, a.ok_requests, a.ok_ns);
  Add(s.fail, a.failed_requests, a.failed_ns);
  Add(s.queue, entry.queue_wait_count,
      entry.queue_wait_sum_ns > 0 ? static_cast<uint64_t>(entry.queue_wait_sum_ns) : 0);
  Add(s.compute_infer, a.ok_requests, a.compute_ns);
  Add(s.compute_input.count, a.ok_requests);
  Add(s.compute_output.count, a.ok_requests);
  Add(s.inference_count, a.ok_rows);
  if (a.last_answer_unix_ms > 0) {
    s.last_inference = std::max(s.last_inference, static_cast<uint64_t>(a.last_answer_unix_ms));
  }
  for (const shm::BatchStatsData& b : a.batches) {
    // A compiled size is at most a few thousand rows; anything else is no entry.
    if (b.executions == 0 || b.batch_size <= 0 || b.batch_size > (int64_t{1} << 31)) {
      continue;
    }
    Add(batches[b.batch_size], b.executions, b.compute_ns);
    Add(s.execution_count, b.executions);
  }
}

nlohmann::json DurationJson(const StatDuration& d) { return {{"count", d.count}, {"ns", d.ns}}; }

void DurationProto(const StatDuration& d, inference::StatisticDuration* out) {
  out->set_count(d.count);
  out->set_ns(d.ns);
}

}  // namespace

ModelStatistics SumModelStatistics(const std::string& key, const std::string& name,
                                   const std::string& version,
                                   const std::vector<shm::StatusSnapshotData>& workers) {
  ModelStatistics s;
  s.name = name;
  s.version = version;
  std::map<int64_t, StatDuration> batches;  // Compiled size -> executions and their time.
  for (const shm::StatusSnapshotData& worker : workers) {
    if (const shm::ModelStatusData* entry = EntryFor(worker, key)) {
      AddWorker(*entry, s, batches);
    }
  }
  for (const auto& [size, infer] : batches) {
    BatchStatistics b;
    b.batch_size = size;
    b.compute_infer = infer;
    b.compute_input.count = infer.count;
    b.compute_output.count = infer.count;
    s.batch_stats.push_back(b);
  }
  return s;
}

nlohmann::json StatisticsJson(const std::vector<ModelStatistics>& stats) {
  nlohmann::json models = nlohmann::json::array();
  for (const ModelStatistics& s : stats) {
    nlohmann::json batches = nlohmann::json::array();
    for (const BatchStatistics& b : s.batch_stats) {
      batches.push_back({{"batch_size", b.batch_size},
                         {"compute_input", DurationJson(b.compute_input)},
                         {"compute_infer", DurationJson(b.compute_infer)},
                         {"compute_output", DurationJson(b.compute_output)}});
    }
    StatDuration none;  // ferry keeps no response cache.
    models.push_back({{"name", s.name},
                      {"version", s.version},
                      {"last_inference", s.last_inference},
                      {"inference_count", s.inference_count},
                      {"execution_count", s.execution_count},
                      {"inference_stats",
                       {{"success", DurationJson(s.success)},
                        {"fail", DurationJson(s.fail)},
                        {"queue", DurationJson(s.queue)},
                        {"compute_input", DurationJson(s.compute_input)},
                        {"compute_infer", DurationJson(s.compute_infer)},
                        {"compute_output", DurationJson(s.compute_output)},
                        {"cache_hit", DurationJson(none)},
                        {"cache_miss", DurationJson(none)}}},
                      {"batch_stats", batches},
                      {"memory_usage", nlohmann::json::array()}});
  }
  return {{"model_stats", models}};
}

void StatisticsProto(const std::vector<ModelStatistics>& stats,
                     inference::ModelStatisticsResponse* out) {
  for (const ModelStatistics& s : stats) {
    inference::ModelStatistics* m = out->add_model_stats();
    m->set_name(s.name);
    m->set_version(s.version);
    m->set_last_inference(s.last_inference);
    m->set_inference_count(s.inference_count);
    m->set_execution_count(s.execution_count);
    inference::InferStatistics* i = m->mutable_inference_stats();
    DurationProto(s.success, i->mutable_success());
    DurationProto(s.fail, i->mutable_fail());
    DurationProto(s.queue, i->mutable_queue());
    DurationProto(s.compute_input, i->mutable_compute_input());
    DurationProto(s.compute_infer, i->mutable_compute_infer());
    DurationProto(s.compute_output, i->mutable_compute_output());
    i->mutable_cache_hit();
    i->mutable_cache_miss();
    for (const BatchStatistics& b : s.batch_stats) {
      inference::InferBatchStatistics* e = m->add_batch_stats();
      e->set_batch_size(static_cast<uint64_t>(b.batch_size));
      DurationProto(b.compute_input, e->mutable_compute_input());
      DurationProto(b.compute_infer, e->mutable_compute_infer());
      DurationProto(b.compute_output, e->mutable_compute_output());
    }
  }
}

}  // namespace ferry::frontend
