// Triton's trace extension on a hook host (docs/frontend.md, "Tracing"): GET
// /v2/trace/setting (gRPC TraceSetting with no settings) answers the node's trace settings;
// POST (TraceSetting with some) changes them for the whole node. The hook host samples
// requests with them and writes each sampled request's spans into its trace store
// (shm/trace_store.h), which ferryd exports to the OTLP collector.
//
// A change applies here at once and is asked of ferryd through the store (`asked`); ferryd
// makes it the node's within a tick and counts trace_count node-wide (a hook host also stops
// by itself after trace_count of its own, so the node overshoots by at most one tick's).
//
// Hostile input: only Triton's keys, each a string (trace_level a list of them) of the right
// value: trace_level OFF or TIMESTAMPS (TENSORS is refused: ferry records no tensors),
// trace_rate 1..16777215, trace_count -1..67108862, log_frequency 0, trace_file empty (spans
// go to the collector, not a file), trace_mode opentelemetry; anything else is
// INVALID_ARGUMENT naming the key, and nothing changes.
//
// Thread safety: any thread. Lifetime: the store outlives it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "common/result.h"
#include "common/trace_settings.h"
#include "hookhost/hookhost.h"
#include "shm/trace_store.h"

namespace ferry::frontend {

// Triton's JSON object of the settings (every value a string, trace_level a list).
nlohmann::json TraceSettingsJson(const TraceSettings& s);
// `base` with the keys `changes` names applied (a null value: that key's default).
// INVALID_ARGUMENT naming the first key that is unknown or of the wrong type or value.
Result<TraceSettings> MergeTraceSettings(const TraceSettings& base, const nlohmann::json& changes);

class TraceEndpoint {
 public:
  // `store` null: no tracing here (settings read as off; changes UNAVAILABLE).
  explicit TraceEndpoint(shm::TraceStore* store);

  // The node's settings as this hook host holds them (its own change at once).
  TraceSettings Current() const;
  // Merges `changes` into Current(), applies the result here and asks ferryd for it.
  Result<TraceSettings> Update(const nlohmann::json& changes);

  // Per request, at submission: whether to trace it. Tracing off: four atomic loads.
  bool Sample();
  // A sampled request's spans, from its answer's timings (`traceparent`: the request's,
  // version-00 form, or empty; `code` 0 or the ErrorCode + 1). Its end is now.
  void Record(std::string_view traceparent, uint32_t model, const hookhost::RequestTimings& t,
              uint32_t code);

 private:
  // The settings word this host samples with and the `sampled` figure its count is charged
  // from: ferryd's, or this host's own change until ferryd has taken it.
  std::pair<uint64_t, uint64_t> WordAndBase() const;
  shm::TraceStore* store_;
  std::mutex mu_;                         // Update, and Record's writes into the store.
  std::atomic<uint64_t> asked_sequence_;  // Of the last change asked; continues a predecessor's.
  std::atomic<uint64_t> own_word_{0};     // That change's word and base.
  std::atomic<uint64_t> own_base_{0};
  std::atomic<uint64_t> seen_{0};  // Requests offered to Sample.
};

}  // namespace ferry::frontend
