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
  auto sum = [&](size_t m, size_t t, auto field) {
    double total = 0;
    for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
      const shm::RequestCountsData& c =
          segment.frontend_counters(segment.HookhostSlot(h)).models[m][t];
      total += static_cast<double>(field(c));
    }
    return total;
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
  out.Family("ferry_frontend_unrouted_requests_total", "counter",
             "Client requests answered before a model was found (an unknown model, a hook host "
             "full or stopping), by code.");
  for (size_t o = 1; o < shm::kOutcomes; ++o) {
    double total = 0;
    for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
      total += static_cast<double>(segment.frontend_counters(segment.HookhostSlot(h))
                                       .unrouted[o]
                                       .load(std::memory_order_relaxed));
    }
    out.Sample({{"code", std::string(ErrorCodeName(static_cast<ErrorCode>(o - 1)))}}, total);
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
}

}  // namespace

constexpr int64_t kScrapePatienceNs = 20'000'000;

std::string RenderMetrics(const shm::Segment& segment, const SupervisorCounters& counters) {
  struct WorkerView {
    uint32_t index;
    shm::StatusSnapshotData status;
  };
  std::vector<WorkerView> workers;
  for (uint32_t w = 0; w < segment.workers(); ++w) {
    // A worker caught mid-publish is waited for: a scrape without its series would read as
    // its counters vanishing.
    Result<shm::StatusSnapshotData> s =
        shm::ReadSettledStatus(segment, segment.WorkerSlot(w), kScrapePatienceNs);
    if (s.ok()) {
      workers.push_back({w, *s});
    }
  }
  Writer out;
  // Every model a worker lists, but the placeholders of unloaded ones.
  auto each_model = [&](auto visit) {
    for (const WorkerView& w : workers) {
      for (uint32_t m = 0; m < w.status.num_models && m < shm::kMaxStatusModels; ++m) {
        if (w.status.models[m].state != static_cast<uint32_t>(shm::ModelLoadState::kUnloaded)) {
          visit(w, w.status.models[m]);
        }
      }
    }
  };
  auto per_model = [&](const std::string& name, const char* type, const char* help, auto value) {
    out.Family(name, type, help);
    each_model([&](const WorkerView& w, const shm::ModelStatusData& d) {
      out.Sample({{"model", Name(d)}, {"gpu", std::to_string(w.index)}}, value(d));
    });
  };
  // A cumulative histogram per model: `le` holds counts at each of `bounds` (scaled into the
  // label by `unit`), then +Inf, _sum and _count.
  auto histogram = [&](const std::string& name, const char* help, std::span<const int64_t> bounds,
                       double unit, auto le, auto count, auto sum) {
    out.Family(name, "histogram", help);
    each_model([&](const WorkerView& w, const shm::ModelStatusData& d) {
      std::string gpu = std::to_string(w.index);
      for (size_t b = 0; b < bounds.size(); ++b) {
        out.SampleAs("_bucket",
                     {{"model", Name(d)},
                      {"gpu", gpu},
                      {"le", fmt::format("{}", static_cast<double>(bounds[b]) * unit)}},
                     static_cast<double>(le(d)[b]));
      }
      out.SampleAs("_bucket", {{"model", Name(d)}, {"gpu", gpu}, {"le", "+Inf"}},
                   static_cast<double>(count(d)));
      out.SampleAs("_sum", {{"model", Name(d)}, {"gpu", gpu}}, sum(d));
      out.SampleAs("_count", {{"model", Name(d)}, {"gpu", gpu}}, static_cast<double>(count(d)));
    });
  };
  out.Family("ferry_requests_total", "counter",
             "Requests answered by the workers, by outcome: success, rejected (queue full or "
             "invalid), shed (deadline could not be met), failed (could not run), cancelled "
             "(taken out of the queue: the client left), error (backend error).");
  for (const WorkerView& w : workers) {
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
        out.Sample({{"model", Name(d)}, {"gpu", std::to_string(w.index)}, {"outcome", outcome}},
                   static_cast<double>(value));
      }
    }
  }
  per_model("ferry_queue_depth", "gauge", "Requests queued at the worker.",
            [](const shm::ModelStatusData& d) { return static_cast<double>(d.queue_depth); });
  per_model("ferry_outstanding_requests", "gauge", "Requests queued or executing.",
            [](const shm::ModelStatusData& d) { return static_cast<double>(d.outstanding); });
  per_model("ferry_queue_wait_p50_seconds", "gauge",
            "Median time a request waited in the queue, over the recent window.",
            [](const shm::ModelStatusData& d) {
              return static_cast<double>(d.queue_wait_p50_ns) * 1e-9;
            });
  per_model("ferry_queue_wait_p99_seconds", "gauge",
            "99th percentile of queue wait, over the recent window.",
            [](const shm::ModelStatusData& d) {
              return static_cast<double>(d.queue_wait_p99_ns) * 1e-9;
            });
  histogram(
      "ferry_queue_wait_seconds",
      "Time requests waited in the worker's queue before their batch began, since the worker "
      "started (a bucket's count is exact to 1/8 of an octave).",
      shm::kQueueWaitBoundsNs, 1e-9, [](const shm::ModelStatusData& d) { return d.queue_wait_le; },
      [](const shm::ModelStatusData& d) { return d.queue_wait_count; },
      [](const shm::ModelStatusData& d) {
        return static_cast<double>(d.queue_wait_sum_ns) * 1e-9;
      });
  histogram(
      "ferry_batch_size", "The compiled batch size of each dispatch, since the worker started.",
      shm::kBatchSizeBounds, 1.0, [](const shm::ModelStatusData& d) { return d.batch_size_le; },
      [](const shm::ModelStatusData& d) { return d.batch_size_count; },
      [](const shm::ModelStatusData& d) { return static_cast<double>(d.batch_size_sum); });
  per_model("ferry_compute_seconds_total", "counter", "Execution time spent on the model.",
            [](const shm::ModelStatusData& d) { return d.total_compute_seconds; });
  per_model("ferry_compute_share", "gauge",
            "The model's fraction of the worker's recent execution time.",
            [](const shm::ModelStatusData& d) { return d.recent_compute; });
  per_model("ferry_dispatches_total", "counter", "Executions (a coalesced batch counts once).",
            [](const shm::ModelStatusData& d) { return static_cast<double>(d.dispatch_count); });
  per_model("ferry_rows_total", "counter", "Request rows executed.",
            [](const shm::ModelStatusData& d) { return static_cast<double>(d.rows_served); });
  per_model("ferry_padding_rows_total", "counter",
            "Rows executed only to fill a compiled batch size.",
            [](const shm::ModelStatusData& d) { return static_cast<double>(d.padding_rows); });
  per_model("ferry_model_loaded", "gauge", "1 when the model's weights are on the device.",
            [](const shm::ModelStatusData& d) { return d.loaded != 0 ? 1.0 : 0.0; });
  per_model("ferry_model_failed", "gauge", "1 when the model failed to load.",
            [](const shm::ModelStatusData& d) {
              return d.state == static_cast<uint32_t>(shm::ModelLoadState::kFailed) ? 1.0 : 0.0;
            });
  per_model("ferry_model_weight", "gauge", "The model's fair-share weight.",
            [](const shm::ModelStatusData& d) { return d.weight; });

  per_model("ferry_model_load_seconds", "gauge",
            "How long the worker took to load the model (weights onto the device, executables "
            "built).",
            [](const shm::ModelStatusData& d) { return d.load_seconds; });
  out.Family("ferry_model_residency", "gauge",
             "The model's residency floor (pinned, warm, on_demand): 1 for the floor in force.");
  each_model([&](const WorkerView& w, const shm::ModelStatusData& d) {
    out.Sample({{"model", Name(d)},
                {"gpu", std::to_string(w.index)},
                {"residency", std::string(ResidencyName(static_cast<Residency>(d.residency)))}},
               1.0);
  });

  auto per_gpu = [&](const std::string& name, const char* type, const char* help, auto value) {
    out.Family(name, type, help);
    for (const WorkerView& w : workers) {
      out.Sample({{"gpu", std::to_string(w.index)}}, static_cast<double>(value(w.status)));
    }
  };
  using Snapshot = shm::StatusSnapshotData;
  per_gpu("ferry_model_loads_total", "counter",
          "Models the worker loaded onto its device (at start and by ferryctl load).",
          [](const Snapshot& s) { return s.model_loads; });
  per_gpu("ferry_model_load_failures_total", "counter", "Model loads that failed on the worker.",
          [](const Snapshot& s) { return s.model_load_failures; });
  per_gpu("ferry_model_unloads_total", "counter",
          "Models whose weights the worker freed (ferryctl unload).",
          [](const Snapshot& s) { return s.model_unloads; });
  per_gpu("ferry_model_load_seconds_total", "counter", "Time the worker spent loading models.",
          [](const Snapshot& s) { return s.model_load_seconds; });
  per_gpu("ferry_gpu_memory_used_bytes", "gauge", "Device memory the worker holds.",
          [](const Snapshot& s) { return s.device_memory_in_use; });
  per_gpu("ferry_invalid_descriptors_total", "counter",
          "Descriptors a worker refused as invalid (a peer writing garbage).",
          [](const Snapshot& s) { return s.invalid_descriptors; });
  per_gpu("ferry_host_gap_p99_seconds", "gauge",
          "99th percentile of host time between executions while work waited.",
          [](const Snapshot& s) { return static_cast<double>(s.host_gap_p99_ns) * 1e-9; });

  // Tenant n's label, or none for tenant 0 (and any number ferryd never declared).
  auto with_tenant = [&](std::map<std::string, std::string> labels, size_t tenant) {
    if (tenant >= 1 && tenant <= counters.tenants.size()) {
      labels["tenant"] = counters.tenants[tenant - 1];
    }
    return labels;
  };
  out.Family("ferry_tenant_requests_total", "counter",
             "Requests the worker executed, by tenant (none: requests that named no tenant).");
  for (const WorkerView& w : workers) {
    for (size_t t = 0; t <= std::min<size_t>(counters.tenants.size(), shm::kMaxTenants); ++t) {
      out.Sample(with_tenant({{"gpu", std::to_string(w.index)}}, t),
                 static_cast<double>(w.status.tenant_requests[t]));
    }
  }
  out.Family("ferry_tenant_compute_seconds_total", "counter",
             "Execution time spent on each tenant's requests (a batch's time split over its "
             "requests by rows).");
  for (const WorkerView& w : workers) {
    for (size_t t = 0; t <= std::min<size_t>(counters.tenants.size(), shm::kMaxTenants); ++t) {
      out.Sample(with_tenant({{"gpu", std::to_string(w.index)}}, t),
                 w.status.tenant_compute_seconds[t]);
    }
  }
  // Model names from the worker listing the most (one starting lists none yet).
  const WorkerView* names = nullptr;
  for (const WorkerView& w : workers) {
    if (names == nullptr || w.status.num_models > names->status.num_models) {
      names = &w;
    }
  }
  RenderFrontEnd(segment, names == nullptr ? nullptr : &names->status, with_tenant,
                 counters.tenants.size(), out);

  auto kind = [&](uint32_t slot) { return segment.IsWorkerSlot(slot) ? "worker" : "hookhost"; };
  auto index = [&](uint32_t slot) {
    return std::to_string(segment.IsWorkerSlot(slot) ? slot - segment.hookhosts() : slot);
  };
  out.Family("ferry_arena_bytes_in_use", "gauge", "Shared-memory arena bytes a process holds.");
  for (uint32_t s = 0; s < segment.num_slots(); ++s) {
    out.Sample(
        {{"kind", kind(s)}, {"index", index(s)}},
        static_cast<double>(segment.accounting(s).bytes_in_use.load(std::memory_order_relaxed)));
  }
  out.Family("ferry_arena_failed_allocations_total", "counter",
             "Arena allocations refused for lack of room (requests answered RESOURCE_EXHAUSTED).");
  for (uint32_t s = 0; s < segment.num_slots(); ++s) {
    out.Sample({{"kind", kind(s)}, {"index", index(s)}},
               static_cast<double>(
                   segment.accounting(s).failed_allocations.load(std::memory_order_relaxed)));
  }
  out.Family("ferry_process_restarts_total", "counter", "Times ferryd restarted the process.");
  for (uint32_t s = 0; s < segment.num_slots(); ++s) {
    out.Sample({{"kind", kind(s)}, {"index", index(s)}},
               static_cast<double>(counters.restarts[s].load()));
  }
  out.Family("ferry_process_up", "gauge", "1 when the process is running and ready.");
  for (uint32_t s = 0; s < segment.num_slots(); ++s) {
    out.Sample({{"kind", kind(s)}, {"index", index(s)}}, counters.up[s].load() ? 1.0 : 0.0);
  }
  out.Family("ferry_node_ready", "gauge", "1 when every process of the node is ready.");
  out.Sample({}, counters.ready.load() ? 1.0 : 0.0);
  return out.Take();
}

}  // namespace ferry::supervisor
