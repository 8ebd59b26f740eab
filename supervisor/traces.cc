// The trace extension on ferryd's side (docs/frontend.md, "Tracing"): a trace store per hook
// host (shm/trace_store.h), the node's settings published into each, changes a client asked
// of a hook host made the node's, trace_count counted node-wide, and the spans the hook hosts
// wrote handed to the OTLP exporter (trace_exporter.h), every tick.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

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
  PublishTraceSettings(TracesSampledNow());
  spdlog::info("traces: OTLP/HTTP to {}{}, level {}, rate 1/{}", endpoint.first, endpoint.second,
               trace_node.timestamps ? "TIMESTAMPS" : "OFF", trace_node.rate);
  return OkStatus();
}

void Supervisor::Impl::RemoveTraces() {
  PumpTraces();      // The last tick's spans.
  exporter.reset();  // Sends what it holds, within its stop deadline.
  for (uint32_t h = 0; h < trace_stores.size(); ++h) {
    shm::TraceStore::Remove(segment->name(), h);
  }
  trace_stores.clear();
}

std::vector<uint64_t> Supervisor::Impl::TracesSampledNow() const {
  std::vector<uint64_t> now;
  for (const shm::TraceStore& s : trace_stores) {
    now.push_back(s.area().sampled.load(std::memory_order_relaxed));
  }
  return now;
}

uint64_t Supervisor::Impl::TracesSampledSince(const std::vector<uint64_t>& now) const {
  uint64_t sum = 0;
  for (size_t h = 0; h < now.size(); ++h) {
    uint64_t since = now[h] - std::min(now[h], trace_sampled_base[h]);  // A count may lie.
    sum = since > UINT64_MAX - sum ? UINT64_MAX : sum + since;
  }
  return sum;
}

void Supervisor::Impl::PublishTraceSettings(const std::vector<uint64_t>& sampled) {
  ++trace_sequence;
  uint64_t word = trace_node.Encode(trace_sequence);
  for (size_t h = 0; h < trace_stores.size(); ++h) {
    // The word's count is what was left with each host's `sampled` at `sampled[h]`: the word
    // first, then the base (a host reads them the other way round).
    shm::TraceAreaData& area = trace_stores[h].area();
    area.settings.store(word, std::memory_order_release);
    area.sampled_base.store(h < sampled.size() ? sampled[h] : 0, std::memory_order_release);
  }
}

namespace {

// A span a hook host wrote, checked before it reaches the collector: ids that are ids and a
// start within the last hour (or a minute ahead), so one host cannot spoil a batch.
bool SpanLooksSane(const shm::TraceSpanData& d, int64_t now_unix_ns) {
  constexpr int64_t kHourNs = 3'600'000'000'000;
  return (d.trace_hi | d.trace_lo) != 0 && d.span != 0 && d.start_unix_ns > now_unix_ns - kHourNs &&
         d.start_unix_ns < now_unix_ns + kHourNs / 60;
}

}  // namespace

void Supervisor::Impl::PumpTraces() {
  if (trace_stores.empty() || !exporter) {
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
      area.asked_taken.store(asked, std::memory_order_release);
      continue;
    }
    trace_node = s;
    trace_count_base = s.count;
    // The count starts at the change: the asking host's samples since it asked count (it
    // sampled with the change at once), the others' (which had not seen it) do not.
    std::vector<uint64_t> now = TracesSampledNow();
    for (size_t k = 0; k < trace_stores.size(); ++k) {
      uint64_t asked_at = trace_stores[k].area().asked_sampled.load(std::memory_order_relaxed);
      trace_sampled_base[k] = k == h ? std::min(asked_at, now[k]) : now[k];
    }
    uint64_t used = TracesSampledSince(now);  // The asking host's, since it asked.
    trace_node.count =
        s.count < 0 ? -1 : s.count - static_cast<int64_t>(std::min<uint64_t>(used, s.count));
    trace_node.timestamps = s.timestamps && trace_node.count != 0;
    PublishTraceSettings(now);
    area.asked_taken.store(asked, std::memory_order_release);
    spdlog::info("trace settings (asked of hook host {}): level {}, rate 1/{}, count {}", h,
                 s.timestamps ? "TIMESTAMPS" : "OFF", s.rate, s.count);
  }
  // trace_count, node-wide: what is left is republished with the figures it was counted at.
  if (trace_node.timestamps && trace_count_base >= 0) {
    std::vector<uint64_t> now = TracesSampledNow();
    uint64_t used = TracesSampledSince(now);
    int64_t left = used >= static_cast<uint64_t>(trace_count_base)
                       ? 0
                       : trace_count_base - static_cast<int64_t>(used);
    if (left != trace_node.count) {
      trace_node.count = left;
      trace_node.timestamps = left > 0;
      PublishTraceSettings(now);
    }
  }
  int64_t now_unix = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::vector<ExportSpan> spans;
  for (shm::TraceStore& store : trace_stores) {
    for (const shm::TraceSpanData& d : store.Take()) {
      if (!SpanLooksSane(d, now_unix)) {
        ++trace_spans_refused;
        continue;
      }
      std::string model =
          d.model < model_table.size() ? model_table[d.model] : "#" + std::to_string(d.model);
      spans.push_back({d, std::move(model)});
    }
  }
  exporter->Push(std::move(spans));
  uint64_t dropped = exporter->dropped();
  for (const shm::TraceStore& store : trace_stores) {
    dropped += std::min<uint64_t>(store.area().dropped.load(std::memory_order_relaxed),
                                  uint64_t{1} << 48);  // A hook host's count may lie.
  }
  counters->traces_exported.store(exporter->exported());
  counters->traces_failed.store(exporter->failed());
  counters->traces_dropped.store(dropped);
  counters->traces_refused.store(trace_spans_refused);
}

}  // namespace ferry::supervisor
