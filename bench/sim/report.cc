#include "bench/sim/report.h"

#include <cstdio>
#include <string>

namespace ferry::sim {

namespace {

nlohmann::json TenantsToJson(const RunReport& run) {
  nlohmann::json tenants = nlohmann::json::array();
  for (const TenantReport& t : run.tenants) {
    tenants.push_back({{"name", t.name},
                       {"weight", t.weight},
                       {"share", t.share},
                       {"target_share", t.target_share},
                       {"queue_wait_p50_s", t.queue_wait_p50_s},
                       {"queue_wait_p99_s", t.queue_wait_p99_s},
                       {"requests_completed", t.requests_completed},
                       {"longest_gap_s", t.longest_gap_s},
                       {"lag_bound_s", t.lag_bound_s}});
  }
  return tenants;
}

nlohmann::json PrioritiesToJson(const RunReport& run) {
  nlohmann::json priorities = nlohmann::json::array();
  for (const PriorityReport& p : run.priorities) {
    priorities.push_back({{"level", p.level},
                          {"share", p.share},
                          {"queue_wait_p50_s", p.queue_wait_p50_s},
                          {"queue_wait_p99_s", p.queue_wait_p99_s},
                          {"requests_completed", p.requests_completed}});
  }
  return priorities;
}

}  // namespace

nlohmann::json RunToJson(const RunReport& run) {
  nlohmann::json models = nlohmann::json::array();
  for (const ModelReport& m : run.models) {
    nlohmann::json histogram = nlohmann::json::object();
    for (const auto& [size, count] : m.batch_size_histogram) {
      histogram[std::to_string(size)] = count;
    }
    nlohmann::json streams = nlohmann::json::array();
    for (const StreamReport& s : m.streams) {
      streams.push_back({{"name", s.name},
                         {"completed", s.completed},
                         {"met", s.met},
                         {"missed", s.missed},
                         {"dropped", s.dropped},
                         {"goodput_rows_per_s", s.goodput_rows_per_s}});
    }
    models.push_back({{"name", m.name},
                      {"longest_gap_s", m.longest_gap_s},
                      {"lag_bound_s", m.lag_bound_s},
                      {"max_queue_wait_s", m.max_queue_wait_s},
                      {"batch_size_histogram", histogram},
                      {"streams", streams},
                      {"weight", m.weight},
                      {"share", m.share},
                      {"target_share", m.target_share},
                      {"throughput_rows_per_s", m.throughput_rows_per_s},
                      {"queue_wait_p50_s", m.queue_wait_p50_s},
                      {"queue_wait_p99_s", m.queue_wait_p99_s},
                      {"deadline_misses", m.deadline_misses},
                      {"dropped", m.dropped},
                      {"rejected", m.rejected},
                      {"goodput_rows_per_s", m.goodput_rows_per_s},
                      {"capacity_rows_per_s", m.capacity_rows_per_s},
                      {"dispatches", m.dispatches},
                      {"requests_completed", m.requests_completed},
                      {"gpu_seconds", m.gpu_seconds},
                      {"weight_loads", m.weight_loads},
                      {"weight_evictions", m.weight_evictions},
                      {"weight_load_seconds", m.weight_load_seconds}});
  }
  nlohmann::json windows = nlohmann::json::array();
  for (const ShareWindow& w : run.windows) {
    windows.push_back({{"start_s", w.start_s},
                       {"shares", w.shares},
                       {"backlogged", w.backlogged},
                       {"targets", w.targets}});
  }
  return {{"label", run.label},
          {"models", models},
          {"tenants", TenantsToJson(run)},
          {"priorities", PrioritiesToJson(run)},
          {"windows", windows},
          {"jain", run.jain},
          {"utilization", run.utilization},
          {"padding_waste", run.padding_waste},
          {"missed_gpu_fraction", run.missed_gpu_fraction},
          {"goodput_vs_capacity", run.goodput_vs_capacity},
          {"decision_ns_median", run.decision_ns_median},
          {"decision_ns_p99", run.decision_ns_p99},
          {"decisions", run.decisions}};
}

nlohmann::json ReportToJson(const ScenarioReport& report) {
  nlohmann::json out = RunToJson(report.ferry);
  out["scenario"] = report.scenario;
  out["alternatives"] = nlohmann::json::array();
  for (const RunReport& run : report.alternatives) {
    out["alternatives"].push_back(RunToJson(run));
  }
  out["baselines"] = nlohmann::json::array();
  for (const RunReport& run : report.baselines) {
    out["baselines"].push_back(RunToJson(run));
  }
  return out;
}

namespace {

void PrintRun(const RunReport& run, std::ostream& out) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "\n%s: jain %.4f, utilisation %.3f, padding %.3f, GPU on misses %.4f, "
                "goodput/capacity %.3f, decision median %.0f ns (p99 %.0f)\n",
                run.label.c_str(), run.jain, run.utilization, run.padding_waste,
                run.missed_gpu_fraction, run.goodput_vs_capacity, run.decision_ns_median,
                run.decision_ns_p99);
  out << line;
  std::snprintf(line, sizeof(line), "  %-12s %6s %7s %7s %11s %11s %9s %9s %8s %8s %9s %9s %9s\n",
                "model", "weight", "share", "target", "rows/s", "goodput/s", "wait p50", "wait p99",
                "misses", "dropped", "dispatch", "max gap", "bound");
  out << line;
  for (const ModelReport& m : run.models) {
    std::snprintf(line, sizeof(line),
                  "  %-12s %6.2f %7.4f %7.4f %11.1f %11.1f %8.2fms %8.2fms %8llu %8llu %9llu "
                  "%7.2fms %7.2fms\n",
                  m.name.c_str(), m.weight, m.share, m.target_share, m.throughput_rows_per_s,
                  m.goodput_rows_per_s, m.queue_wait_p50_s * 1e3, m.queue_wait_p99_s * 1e3,
                  static_cast<unsigned long long>(m.deadline_misses),
                  static_cast<unsigned long long>(m.dropped),
                  static_cast<unsigned long long>(m.dispatches), m.longest_gap_s * 1e3,
                  m.lag_bound_s * 1e3);
    out << line;
  }
  for (const TenantReport& t : run.tenants) {
    std::snprintf(line, sizeof(line),
                  "  tenant %-12s weight %5.2f share %.4f (target %.4f), wait p99 %.2fms, "
                  "max gap %.2fms (bound %.2fms)\n",
                  t.name.c_str(), t.weight, t.share, t.target_share, t.queue_wait_p99_s * 1e3,
                  t.longest_gap_s * 1e3, t.lag_bound_s * 1e3);
    out << line;
  }
  if (!run.tenants.empty() || run.priorities.size() > 1) {
    for (const PriorityReport& p : run.priorities) {
      std::snprintf(line, sizeof(line), "  priority %d share %.4f, wait p50 %.2fms p99 %.2fms\n",
                    p.level, p.share, p.queue_wait_p50_s * 1e3, p.queue_wait_p99_s * 1e3);
      out << line;
    }
  }
  uint64_t loads = 0, evictions = 0;
  double load_seconds = 0;
  std::string per_model;
  for (const ModelReport& m : run.models) {
    loads += m.weight_loads;
    evictions += m.weight_evictions;
    load_seconds += m.weight_load_seconds;
    if (m.weight_loads > 0) {
      per_model += " " + m.name + " " + std::to_string(m.weight_loads);
    }
  }
  if (loads > 0 || evictions > 0) {
    std::snprintf(line, sizeof(line), "  weights: %llu cold loads (%.2f s), %llu evictions;",
                  static_cast<unsigned long long>(loads), load_seconds,
                  static_cast<unsigned long long>(evictions));
    out << line << " loads by model:" << per_model << "\n";
  }
}

}  // namespace

void PrintTable(const ScenarioReport& report, std::ostream& out) {
  out << "scenario " << report.scenario << "\n";
  PrintRun(report.ferry, out);
  for (const RunReport& run : report.alternatives) {
    PrintRun(run, out);
  }
  for (const RunReport& run : report.baselines) {
    PrintRun(run, out);
  }
}

}  // namespace ferry::sim
