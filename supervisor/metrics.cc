#include "supervisor/metrics.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <span>

#include "config/scheduler_config.h"
#include "shm/status.h"

namespace ferry::supervisor {
namespace {

// Label values are escaped as the format requires (backslash, quote, newline).
std::string Escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  // One metric family: HELP and TYPE once, then its samples.
  void Family(const std::string& name, const char* type, const char* help) {
    current_ = name;
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::map<std::string, std::string>& labels, double value) {
    SampleAs("", labels, value);
  }
  // A sample of the current family under `suffix` (a histogram's _bucket, _sum, _count).
  void SampleAs(const char* suffix, const std::map<std::string, std::string>& labels,
                double value) {
    out_ += current_ + suffix;
    if (!labels.empty()) {
      out_ += "{";
      bool first = true;
      for (const auto& [k, v] : labels) {
        out_ += (first ? "" : ",") + k + "=\"" + Escape(v) + "\"";
        first = false;
      }
      out_ += "}";
    }
    out_ += " " + fmt::format("{}", value) + "\n";
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string current_;
  std::string out_;
};

std::string Name(const shm::ModelStatusData& m) {
  return std::string(m.name, strnlen(m.name, sizeof(m.name)));
}

// The hook hosts' counters (shm::FrontEndCountersData), summed over hook hosts, per model
// (named from a worker's snapshot: wire indices are the node's) and tenant.
template <typename WithTenant>
void RenderFrontEnd(const shm::Segment& segment, const shm::StatusSnapshotData* names,
                    WithTenant with_tenant, size_t tenants, Writer& out) {
  size_t models = names == nullptr ? 0 : std::min<size_t>(names->num_models, shm::kMaxStatusModels);
  tenants = std::min<size_t>(tenants, shm::kMaxTenants);
  // A counter summed over the hook hosts; `field` reads it from one's counters.
  auto over_hookhosts = [&](auto field) {
    double total = 0;
    for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
      total += static_cast<double>(field(segment.frontend_counters(segment.HookhostSlot(h))));
    }
    return total;
  };
  auto sum = [&](size_t m, size_t t, auto field) {
    return over_hookhosts(
        [&](const shm::FrontEndCountersData& c) { return field(c.models[m][t]); });
  };
  auto served = [&](size_t m) {
    return names->models[m].state != static_cast<uint32_t>(shm::ModelLoadState::kUnloaded);
  };
  out.Family("ferry_frontend_requests_total", "counter",
             "Client requests the hook hosts answered, by model, tenant and code (OK, or the "
             "error's code: INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, "
             "DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL, CANCELLED).");
  for (size_t m = 0; m < models; ++m) {
    if (!served(m)) {
      continue;
    }
    for (size_t t = 0; t <= tenants; ++t) {
      for (size_t o = 0; o < shm::kOutcomes; ++o) {
        std::string code =
            o == 0 ? "OK" : std::string(ErrorCodeName(static_cast<ErrorCode>(o - 1)));
        out.Sample(with_tenant({{"model", Name(names->models[m])}, {"code", code}}, t),
                   sum(m, t, [&](const shm::RequestCountsData& c) {
                     return c.answered[o].load(std::memory_order_relaxed);
                   }));
      }
    }
  }
  out.Family("ferry_frontend_priority_requests_total", "counter",
             "Client requests the hook hosts answered, by priority level (1 most urgent; 2 the "
             "default) and code.");
  for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
    for (size_t o = 0; o < shm::kOutcomes; ++o) {
      std::string code = o == 0 ? "OK" : std::string(ErrorCodeName(static_cast<ErrorCode>(o - 1)));
      out.Sample({{"priority", std::to_string(level)}, {"code", code}},
                 over_hookhosts([&](const shm::FrontEndCountersData& c) {
                   return c.priority_answered[level][o].load(std::memory_order_relaxed);
                 }));
    }
  }
  out.Family("ferry_frontend_unrouted_requests_total", "counter",
             "Client requests answered before a model was found (an unknown model, a hook host "
             "full or stopping), by code.");
  for (size_t o = 1; o < shm::kOutcomes; ++o) {
    out.Sample({{"code", std::string(ErrorCodeName(static_cast<ErrorCode>(o - 1)))}},
               over_hookhosts([&](const shm::FrontEndCountersData& c) {
                 return c.unrouted[o].load(std::memory_order_relaxed);
               }));
  }
  out.Family("ferry_frontend_plugin_seconds_total", "counter",
             "Time the model's preprocess, postprocess and run plugins ran for client requests.");
  for (size_t m = 0; m < models; ++m) {
    if (!served(m)) {
      continue;
    }
    for (size_t t = 0; t <= tenants; ++t) {
      out.Sample(with_tenant({{"model", Name(names->models[m])}}, t),
                 sum(m, t, [](const shm::RequestCountsData& c) {
                   return c.plugin_ns.load(std::memory_order_relaxed);
                 }) * 1e-9);
    }
  }
  out.Family("ferry_gateway_placements_total", "counter",
             "Requests the hook hosts sent to a worker, by model and by whether the model's "
             "weights were resident there (false: the worker had to load them first); a "
             "request sent again after its worker stalled counts again.");
  for (size_t m = 0; m < models; ++m) {
    if (!served(m)) {
      continue;
    }
    for (int resident : {1, 0}) {
      out.Sample({{"model", Name(names->models[m])}, {"resident", resident ? "true" : "false"}},
                 over_hookhosts([&](const shm::FrontEndCountersData& c) {
                   return c.placements[m][resident].load(std::memory_order_relaxed);
                 }));
    }
  }
}

}  // namespace

constexpr int64_t kScrapePatienceNs = 20'000'000;

namespace {

// One scrape: the workers' settled status, rendered family by family into `out_`.
class Scrape {
 public:
  Scrape(const shm::Segment& segment, const SupervisorCounters& counters)
      : segment_(segment), counters_(counters) {
    for (uint32_t w = 0; w < segment.workers(); ++w) {
      // A worker caught mid-publish is waited for: a scrape without its series would read as
      // its counters vanishing.
      Result<shm::StatusSnapshotData> s =
          shm::ReadSettledStatus(segment, segment.WorkerSlot(w), kScrapePatienceNs);
      if (s.ok()) {
        workers_.push_back({w, *s});
      }
    }
  }

  std::string Render() {
    RenderOutcomes();
    RenderQueues();
    RenderModelState();
    RenderResidency();
    RenderWorkers();
    RenderTenants();
    RenderPriorities();
    RenderFlowQueues();
    // Model names from the worker listing the most (one starting lists none yet).
    const ScrapedWorker* names = nullptr;
    for (const ScrapedWorker& w : workers_) {
      if (names == nullptr || w.status.num_models > names->status.num_models) {
        names = &w;
      }
    }
    auto with_tenant = [this](std::map<std::string, std::string> labels, size_t tenant) {
      return WithTenant(std::move(labels), tenant);
    };
    RenderFrontEnd(segment_, names == nullptr ? nullptr : &names->status, with_tenant,
                   counters_.tenants.size(), out_);
    RenderProcesses();
    RenderTraces();
    return out_.Take();
  }

 private:
  struct ScrapedWorker {
    uint32_t index;
    shm::StatusSnapshotData status;
  };

  // Every model a worker lists, but the placeholders of unloaded ones.
  template <typename Visit>
  void EachModel(Visit visit) {
    for (const ScrapedWorker& w : workers_) {
      for (uint32_t m = 0; m < w.status.num_models && m < shm::kMaxStatusModels; ++m) {
        if (w.status.models[m].state != static_cast<uint32_t>(shm::ModelLoadState::kUnloaded)) {
          visit(w, w.status.models[m]);
        }
      }
    }
  }

  template <typename Value>
  void PerModel(const std::string& name, const char* type, const char* help, Value value) {
    out_.Family(name, type, help);
    EachModel([&](const ScrapedWorker& w, const shm::ModelStatusData& d) {
      out_.Sample({{"model", Name(d)}, {"gpu", std::to_string(w.index)}}, value(d));
    });
  }

  // A cumulative histogram per model: `le` holds counts at each of `bounds` (scaled into the
  // label by `unit`), then +Inf, _sum and _count.
  template <typename Le, typename Count, typename Sum>
  void Histogram(const std::string& name, const char* help, std::span<const int64_t> bounds,
                 double unit, Le le, Count count, Sum sum) {
    out_.Family(name, "histogram", help);
    EachModel([&](const ScrapedWorker& w, const shm::ModelStatusData& d) {
      std::string gpu = std::to_string(w.index);
      for (size_t b = 0; b < bounds.size(); ++b) {
        out_.SampleAs("_bucket",
                      {{"model", Name(d)},
                       {"gpu", gpu},
                       {"le", fmt::format("{}", static_cast<double>(bounds[b]) * unit)}},
                      static_cast<double>(le(d)[b]));
      }
      out_.SampleAs("_bucket", {{"model", Name(d)}, {"gpu", gpu}, {"le", "+Inf"}},
                    static_cast<double>(count(d)));
      out_.SampleAs("_sum", {{"model", Name(d)}, {"gpu", gpu}}, sum(d));
      out_.SampleAs("_count", {{"model", Name(d)}, {"gpu", gpu}}, static_cast<double>(count(d)));
    });
  }

  template <typename Value>
  void PerGpu(const std::string& name, const char* type, const char* help, Value value) {
    out_.Family(name, type, help);
    for (const ScrapedWorker& w : workers_) {
      out_.Sample({{"gpu", std::to_string(w.index)}}, static_cast<double>(value(w.status)));
    }
  }

  // Tenant n's label, or none for tenant 0 (and any number ferryd never declared).
  std::map<std::string, std::string> WithTenant(std::map<std::string, std::string> labels,
                                                size_t tenant) const {
    if (tenant >= 1 && tenant <= counters_.tenants.size()) {
      labels["tenant"] = counters_.tenants[tenant - 1];
    }
    return labels;
  }

  void RenderOutcomes();
  void RenderQueues();
  void RenderModelState();
  void RenderResidency();
  void RenderWorkers();
  void RenderTenants();
  void RenderPriorities();
  void RenderFlowQueues();
  // One histogram's samples (after its Family line) for queue waits `h` under `labels`.
  void WaitSamples(const std::map<std::string, std::string>& labels,
                   const shm::WaitHistogramData& h) {
    for (size_t b = 0; b < kQueueWaitBuckets; ++b) {
      auto with_le = labels;
      with_le["le"] = fmt::format("{}", static_cast<double>(kQueueWaitBoundsNs[b]) * 1e-9);
      out_.SampleAs("_bucket", with_le, static_cast<double>(h.le[b]));
    }
    auto inf = labels;
    inf["le"] = "+Inf";
    out_.SampleAs("_bucket", inf, static_cast<double>(h.count));
    out_.SampleAs("_sum", labels, static_cast<double>(h.sum_ns) * 1e-9);
    out_.SampleAs("_count", labels, static_cast<double>(h.count));
  }
  void RenderProcesses();
  void RenderTraces() {
    out_.Family("ferry_traced_requests_total", "counter",
                "Requests sampled by the trace extension, by what became of their spans "
                "(exported to the OTLP collector, failed, dropped, refused as malformed).");
    out_.Sample({{"outcome", "exported"}}, static_cast<double>(counters_.traces_exported.load()));
    out_.Sample({{"outcome", "failed"}}, static_cast<double>(counters_.traces_failed.load()));
    out_.Sample({{"outcome", "dropped"}}, static_cast<double>(counters_.traces_dropped.load()));
    out_.Sample({{"outcome", "refused"}}, static_cast<double>(counters_.traces_refused.load()));
  }

  const shm::Segment& segment_;
  const SupervisorCounters& counters_;
  std::vector<ScrapedWorker> workers_;
  Writer out_;
};

// What the workers answered, by model and outcome.
void Scrape::RenderOutcomes() {
  out_.Family("ferry_requests_total", "counter",
              "Requests answered by the workers, by outcome: success, rejected (queue full or "
              "invalid), shed (deadline could not be met), failed (could not run), cancelled "
              "(taken out of the queue: the client left), error (backend error).");
  for (const ScrapedWorker& w : workers_) {
    for (uint32_t m = 0; m < w.status.num_models && m < shm::kMaxStatusModels; ++m) {
      const shm::ModelStatusData& d = w.status.models[m];
      if (d.state == static_cast<uint32_t>(shm::ModelLoadState::kUnloaded)) {
        continue;
      }
      for (auto [outcome, value] : {std::pair<const char*, uint64_t>{"success", d.requests_served},
                                    {"rejected", d.rejected},
                                    {"shed", d.shed},
                                    {"failed", d.failed},
                                    {"cancelled", d.cancelled},
                                    {"error", d.errors}}) {
        out_.Sample({{"model", Name(d)}, {"gpu", std::to_string(w.index)}, {"outcome", outcome}},
                    static_cast<double>(value));
      }
    }
  }
}

// Queue depths and waits, and the batch sizes dispatched.
void Scrape::RenderQueues() {
  PerModel("ferry_queue_depth", "gauge", "Requests queued at the worker.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.queue_depth); });
  PerModel("ferry_outstanding_requests", "gauge", "Requests queued or executing.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.outstanding); });
  PerModel("ferry_live_sequences", "gauge",
           "A stateful model's sequences live on the worker (its max_sequences bounds them; 0 "
           "for a model that keeps no state).",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.live_sequences); });
  PerModel("ferry_queue_wait_p50_seconds", "gauge",
           "Median time a request waited in the queue, over the recent window.",
           [](const shm::ModelStatusData& d) {
             return static_cast<double>(d.queue_wait_p50_ns) * 1e-9;
           });
  PerModel("ferry_queue_wait_p99_seconds", "gauge",
           "99th percentile of queue wait, over the recent window.",
           [](const shm::ModelStatusData& d) {
             return static_cast<double>(d.queue_wait_p99_ns) * 1e-9;
           });
  Histogram(
      "ferry_queue_wait_seconds",
      "Time requests waited in the worker's queue before their batch began, since the worker "
      "started (a bucket's count is exact to 1/8 of an octave).",
      shm::kQueueWaitBoundsNs, 1e-9, [](const shm::ModelStatusData& d) { return d.queue_wait_le; },
      [](const shm::ModelStatusData& d) { return d.queue_wait_count; },
      [](const shm::ModelStatusData& d) {
        return static_cast<double>(d.queue_wait_sum_ns) * 1e-9;
      });
  Histogram(
      "ferry_batch_size", "The compiled batch size of each dispatch, since the worker started.",
      shm::kBatchSizeBounds, 1.0, [](const shm::ModelStatusData& d) { return d.batch_size_le; },
      [](const shm::ModelStatusData& d) { return d.batch_size_count; },
      [](const shm::ModelStatusData& d) { return static_cast<double>(d.batch_size_sum); });
}

// Per model: compute, dispatches, rows, load state, weight and residency.
void Scrape::RenderModelState() {
  PerModel("ferry_compute_seconds_total", "counter", "Execution time spent on the model.",
           [](const shm::ModelStatusData& d) { return d.total_compute_seconds; });
  PerModel("ferry_compute_share", "gauge",
           "The model's fraction of the worker's recent execution time.",
           [](const shm::ModelStatusData& d) { return d.recent_compute; });
  PerModel("ferry_dispatches_total", "counter", "Executions (a coalesced batch counts once).",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.dispatch_count); });
  PerModel("ferry_rows_total", "counter", "Request rows executed.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.rows_served); });
  PerModel("ferry_padding_rows_total", "counter",
           "Rows executed only to fill a compiled batch size.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.padding_rows); });
  PerModel("ferry_model_loaded", "gauge",
           "1 when the model's weights are resident on the worker (on the device, or in its "
           "weight budget).",
           [](const shm::ModelStatusData& d) { return d.loaded != 0 ? 1.0 : 0.0; });
  PerModel("ferry_model_failed", "gauge", "1 when the model failed to load.",
           [](const shm::ModelStatusData& d) {
             return d.state == static_cast<uint32_t>(shm::ModelLoadState::kFailed) ? 1.0 : 0.0;
           });
  PerModel("ferry_model_weight", "gauge", "The model's fair-share weight.",
           [](const shm::ModelStatusData& d) { return d.weight; });

  PerModel("ferry_model_load_seconds", "gauge",
           "How long the worker took to load the model (weights onto the device, executables "
           "built).",
           [](const shm::ModelStatusData& d) { return d.load_seconds; });
  out_.Family("ferry_model_residency", "gauge",
              "The model's residency floor (pinned, warm, on_demand): 1 for the floor in force.");
  EachModel([&](const ScrapedWorker& w, const shm::ModelStatusData& d) {
    out_.Sample({{"model", Name(d)},
                 {"gpu", std::to_string(w.index)},
                 {"residency", std::string(ResidencyName(static_cast<Residency>(d.residency)))}},
                1.0);
  });
}

// Per model under a weight budget: cold loads, evictions, load time, bytes.
void Scrape::RenderResidency() {
  PerModel("ferry_weight_loads_total", "counter",
           "Cold loads of the model's weights under the worker's weight budget.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.weight_loads); });
  PerModel("ferry_weight_evictions_total", "counter",
           "Times the model's weights were evicted to make room under the weight budget.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.weight_evictions); });
  PerModel("ferry_weight_load_seconds_total", "counter",
           "Time the model's cold loads took (charged to its fair share).",
           [](const shm::ModelStatusData& d) { return d.weight_load_seconds; });
  PerModel("ferry_weight_bytes", "gauge",
           "Bytes the model's weights take when resident under the weight budget.",
           [](const shm::ModelStatusData& d) { return static_cast<double>(d.weight_bytes); });
  using Snapshot = shm::StatusSnapshotData;
  PerGpu("ferry_weight_budget_bytes", "gauge",
         "The worker's weight budget ([worker] weight_budget; 0: none).",
         [](const Snapshot& s) { return s.weight_budget_bytes; });
  PerGpu("ferry_weight_resident_bytes", "gauge",
         "Bytes of model weights resident under the worker's weight budget.",
         [](const Snapshot& s) { return s.weight_resident_bytes; });
}

// Per worker: loads, device memory, refused descriptors, host gaps.
void Scrape::RenderWorkers() {
  using Snapshot = shm::StatusSnapshotData;
  PerGpu("ferry_model_loads_total", "counter",
         "Models the worker loaded onto its device (at start and by ferryctl load).",
         [](const Snapshot& s) { return s.model_loads; });
  PerGpu("ferry_model_load_failures_total", "counter", "Model loads that failed on the worker.",
         [](const Snapshot& s) { return s.model_load_failures; });
  PerGpu("ferry_model_unloads_total", "counter",
         "Models whose weights the worker freed (ferryctl unload).",
         [](const Snapshot& s) { return s.model_unloads; });
  PerGpu("ferry_model_load_seconds_total", "counter", "Time the worker spent loading models.",
         [](const Snapshot& s) { return s.model_load_seconds; });
  PerGpu("ferry_gpu_memory_used_bytes", "gauge", "Device memory the worker holds.",
         [](const Snapshot& s) { return s.device_memory_in_use; });
  PerGpu("ferry_invalid_descriptors_total", "counter",
         "Descriptors a worker refused as invalid (a peer writing garbage).",
         [](const Snapshot& s) { return s.invalid_descriptors; });
  PerGpu("ferry_host_gap_p99_seconds", "gauge",
         "99th percentile of host time between executions while work waited.",
         [](const Snapshot& s) { return static_cast<double>(s.host_gap_p99_ns) * 1e-9; });
}

// Per worker and tenant: requests executed and their compute.
void Scrape::RenderTenants() {
  out_.Family("ferry_tenant_requests_total", "counter",
              "Requests the worker executed, by tenant (none: requests that named no tenant).");
  for (const ScrapedWorker& w : workers_) {
    for (size_t t = 0; t <= std::min<size_t>(counters_.tenants.size(), shm::kMaxTenants); ++t) {
      out_.Sample(WithTenant({{"gpu", std::to_string(w.index)}}, t),
                  static_cast<double>(w.status.tenant_requests[t]));
    }
  }
  out_.Family("ferry_tenant_compute_seconds_total", "counter",
              "Execution time spent on each tenant's requests (a batch's time split over its "
              "requests by rows).");
  for (const ScrapedWorker& w : workers_) {
    for (size_t t = 0; t <= std::min<size_t>(counters_.tenants.size(), shm::kMaxTenants); ++t) {
      out_.Sample(WithTenant({{"gpu", std::to_string(w.index)}}, t),
                  w.status.tenant_compute_seconds[t]);
    }
  }
}

// Per worker and priority level: requests executed and their compute.
void Scrape::RenderPriorities() {
  out_.Family("ferry_priority_requests_total", "counter",
              "Requests the worker executed, by priority level (1 most urgent; 2 the default).");
  for (const ScrapedWorker& w : workers_) {
    for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
      out_.Sample({{"gpu", std::to_string(w.index)}, {"priority", std::to_string(level)}},
                  static_cast<double>(w.status.priority_requests[level]));
    }
  }
  out_.Family("ferry_priority_compute_seconds_total", "counter",
              "Execution time spent on each priority level's requests (split by rows).");
  for (const ScrapedWorker& w : workers_) {
    for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
      out_.Sample({{"gpu", std::to_string(w.index)}, {"priority", std::to_string(level)}},
                  w.status.priority_compute_seconds[level]);
    }
  }
}

// Per worker, tenant and level: the requests held (queued or executing) and their queue waits.
void Scrape::RenderFlowQueues() {
  size_t tenants = std::min<size_t>(counters_.tenants.size(), shm::kMaxTenants);
  out_.Family("ferry_tenant_outstanding_requests", "gauge",
              "Requests the worker holds (queued or executing), by tenant.");
  for (const ScrapedWorker& w : workers_) {
    for (size_t t = 0; t <= tenants; ++t) {
      out_.Sample(WithTenant({{"gpu", std::to_string(w.index)}}, t),
                  static_cast<double>(w.status.tenant_held[t]));
    }
  }
  out_.Family("ferry_tenant_queue_wait_seconds", "histogram",
              "Time requests waited in the worker's queue before their batch began, by tenant.");
  for (const ScrapedWorker& w : workers_) {
    for (size_t t = 0; t <= tenants; ++t) {
      WaitSamples(WithTenant({{"gpu", std::to_string(w.index)}}, t), w.status.tenant_waits[t]);
    }
  }
  out_.Family("ferry_priority_outstanding_requests", "gauge",
              "Requests the worker holds (queued or executing), by priority level.");
  for (const ScrapedWorker& w : workers_) {
    for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
      out_.Sample({{"gpu", std::to_string(w.index)}, {"priority", std::to_string(level)}},
                  static_cast<double>(w.status.priority_held[level]));
    }
  }
  out_.Family("ferry_priority_queue_wait_seconds", "histogram",
              "Time requests waited in the worker's queue before their batch began, by level.");
  for (const ScrapedWorker& w : workers_) {
    for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
      WaitSamples({{"gpu", std::to_string(w.index)}, {"priority", std::to_string(level)}},
                  w.status.priority_waits[level]);
    }
  }
}

// Per process: arena use, restarts, readiness; and the node's.
void Scrape::RenderProcesses() {
  auto kind = [&](uint32_t slot) { return segment_.IsWorkerSlot(slot) ? "worker" : "hookhost"; };
  auto index = [&](uint32_t slot) {
    return std::to_string(segment_.IsWorkerSlot(slot) ? slot - segment_.hookhosts() : slot);
  };
  out_.Family("ferry_arena_bytes_in_use", "gauge", "Shared-memory arena bytes a process holds.");
  for (uint32_t s = 0; s < segment_.num_slots(); ++s) {
    out_.Sample(
        {{"kind", kind(s)}, {"index", index(s)}},
        static_cast<double>(segment_.accounting(s).bytes_in_use.load(std::memory_order_relaxed)));
  }
  out_.Family("ferry_arena_failed_allocations_total", "counter",
              "Arena allocations refused for lack of room (requests answered RESOURCE_EXHAUSTED).");
  for (uint32_t s = 0; s < segment_.num_slots(); ++s) {
    out_.Sample({{"kind", kind(s)}, {"index", index(s)}},
                static_cast<double>(
                    segment_.accounting(s).failed_allocations.load(std::memory_order_relaxed)));
  }
  out_.Family("ferry_process_restarts_total", "counter", "Times ferryd restarted the process.");
  for (uint32_t s = 0; s < segment_.num_slots(); ++s) {
    out_.Sample({{"kind", kind(s)}, {"index", index(s)}},
                static_cast<double>(counters_.restarts[s].load()));
  }
  out_.Family("ferry_process_up", "gauge", "1 when the process is running and ready.");
  for (uint32_t s = 0; s < segment_.num_slots(); ++s) {
    out_.Sample({{"kind", kind(s)}, {"index", index(s)}}, counters_.up[s].load() ? 1.0 : 0.0);
  }
  out_.Family("ferry_node_ready", "gauge", "1 when every process of the node is ready.");
  out_.Sample({}, counters_.ready.load() ? 1.0 : 0.0);
}

}  // namespace

std::string RenderMetrics(const shm::Segment& segment, const SupervisorCounters& counters) {
  return Scrape(segment, counters).Render();
}

}  // namespace ferry::supervisor
