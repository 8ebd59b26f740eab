// The trace extension on ferryd's side (docs/frontend.md, "Tracing"): a trace store per hook
// host (shm/trace_store.h), the node's settings published into each, changes a client asked
// of a hook host made the node's, trace_count counted node-wide, and the spans the hook hosts
// wrote handed to the OTLP exporter (trace_exporter.h), every tick.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "supervisor/supervisor_impl.h"

namespace ferry::supervisor {

Status Supervisor::Impl::StartTraces() {
  if (config.trace.otlp_endpoint.empty()) {
    return OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(auto endpoint, ParseOtlpEndpoint(config.trace.otlp_endpoint));
  for (uint32_t h = 0; h < segment->hookhosts(); ++h) {
    FERRY_ASSIGN_OR_RETURN(shm::TraceStore store, shm::TraceStore::Create(segment->name(), h));
    trace_stores.push_back(std::move(store));
  }
  trace_asked_seen.assign(trace_stores.size(), 0);
  trace_sampled_base.assign(trace_stores.size(), 0);
  exporter = std::make_unique<TraceExporter>(endpoint.first, endpoint.second, config.node.name);
  trace_node.timestamps = config.trace.timestamps;
  trace_node.rate = static_cast<uint32_t>(config.trace.rate);
  trace_node.count = config.trace.count;
  trace_count_base = trace_node.count;
  PublishTraceSettings();
  spdlog::info("traces: OTLP/HTTP to {}{}, level {}, rate 1/{}", endpoint.first, endpoint.second,
               trace_node.timestamps ? "TIMESTAMPS" : "OFF", trace_node.rate);
  return OkStatus();
}

void Supervisor::Impl::RemoveTraces() {
  exporter.reset();  // Sends what it holds first.
  for (uint32_t h = 0; h < trace_stores.size(); ++h) {
    shm::TraceStore::Remove(segment->name(), h);
  }
  trace_stores.clear();
}

uint64_t Supervisor::Impl::TracesSampled() const {
  uint64_t sum = 0;
  for (size_t h = 0; h < trace_stores.size(); ++h) {
    uint64_t n = trace_stores[h].area().sampled.load(std::memory_order_relaxed);
    uint64_t since = n - std::min(n, trace_sampled_base[h]);
    sum = since > UINT64_MAX - sum ? UINT64_MAX : sum + since;
  }
  return sum;
}

void Supervisor::Impl::PublishTraceSettings() {
  ++trace_sequence;
  uint64_t word = trace_node.Encode(trace_sequence);
  for (shm::TraceStore& s : trace_stores) {
    // The count in the word is what was left when each host's `sampled` read this much.
    s.area().sampled_base.store(s.area().sampled.load(std::memory_order_relaxed),
                                std::memory_order_relaxed);
    s.area().settings.store(word, std::memory_order_release);
  }
}

void Supervisor::Impl::PumpTraces() {
  if (trace_stores.empty()) {
    return;
  }
  for (size_t h = 0; h < trace_stores.size(); ++h) {
    shm::TraceAreaData& area = trace_stores[h].area();
    uint64_t asked = area.asked.load(std::memory_order_acquire);
    if (asked == trace_asked_seen[h]) {
      continue;
    }
    trace_asked_seen[h] = asked;
    TraceSettings s;
    if (!TraceSettings::Decode(area.asked_word.load(std::memory_order_relaxed), &s)) {
      spdlog::warn("hook host {} asked for malformed trace settings", h);
      continue;
    }
    trace_node = s;
    trace_count_base = s.count;
    // The count starts at the change: the asking host's samples since it asked count (it
    // sampled with the change at once), the others' (which had not seen it) do not.
    for (size_t k = 0; k < trace_stores.size(); ++k) {
      const shm::TraceAreaData& other = trace_stores[k].area();
      trace_sampled_base[k] = k == h ? other.asked_sampled.load(std::memory_order_relaxed)
                                     : other.sampled.load(std::memory_order_relaxed);
    }
    PublishTraceSettings();
    spdlog::info("trace settings (asked of hook host {}): level {}, rate 1/{}, count {}", h,
                 s.timestamps ? "TIMESTAMPS" : "OFF", s.rate, s.count);
  }
  // trace_count, node-wide: what is left is republished (each hook host also stops by itself
  // at the last figure it saw, so the node overshoots by at most one tick's traces).
  if (trace_node.timestamps && trace_count_base >= 0) {
    uint64_t used = TracesSampled();
    int64_t left = used >= static_cast<uint64_t>(trace_count_base)
                       ? 0
                       : trace_count_base - static_cast<int64_t>(used);
    if (left != trace_node.count) {
      trace_node.count = left;
      trace_node.timestamps = left > 0;
      PublishTraceSettings();
    }
  }
  std::vector<ExportSpan> spans;
  for (shm::TraceStore& s : trace_stores) {
    for (const shm::TraceSpanData& d : s.Take()) {
      std::string model =
          d.model < model_table.size() ? model_table[d.model] : "#" + std::to_string(d.model);
      spans.push_back({d, std::move(model)});
    }
  }
  exporter->Push(std::move(spans));
}

}  // namespace ferry::supervisor
