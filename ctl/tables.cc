#include "ctl/tables.h"

#include <fmt/format.h>

#include <map>
#include <vector>

namespace ferry::ctl {
namespace {

using nlohmann::json;

// A member as text, "-" when absent or of another type (a reply from another version).
std::string Text(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) {
    return "-";
  }
  const json& v = object[key];
  if (v.is_string()) {
    return v.get<std::string>();
  }
  if (v.is_boolean()) {
    return v.get<bool>() ? "yes" : "no";
  }
  if (v.is_number_float()) {
    return fmt::format("{:.3g}", v.get<double>());
  }
  if (v.is_number()) {
    return v.dump();
  }
  return "-";
}

double Number(const json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_number()
             ? object[key].get<double>()
             : 0.0;
}

const json& Array(const json& object, const char* key) {
  static const json empty = json::array();
  return object.is_object() && object.contains(key) && object[key].is_array() ? object[key] : empty;
}

}  // namespace

std::string FormatStatus(const json& s) {
  std::string out = fmt::format("node {}: {} (segment {}, ferryd pid {})\n\n", Text(s, "node"),
                                Text(s, "state"), Text(s, "segment"), Text(s, "pid"));
  out += fmt::format("{:<10} {:>5} {:>5} {:>8} {:<11} {:>8} {:>9} {:<16} {}\n", "PROCESS", "INDEX",
                     "SLOT", "PID", "STATE", "RESTARTS", "BEAT(ms)", "LAST EXIT", "DEVICE");
  for (const json& c : Array(s, "children")) {
    out += fmt::format("{:<10} {:>5} {:>5} {:>8} {:<11} {:>8} {:>9} {:<16} {}\n", Text(c, "kind"),
                       Text(c, "index"), Text(c, "slot"), Text(c, "pid"),
                       Text(c, "state") + (Number(c, "crash_looping") != 0 ? "!" : ""),
                       Text(c, "restarts"), Text(c, "heartbeat_age_ms"), Text(c, "last_exit"),
                       c.contains("device") ? Text(c, "device") : "");
  }
  out += fmt::format("\n{:<6} {:<20} {:<8} {:>7} {:<10} {:>7} {:>7}  {}\n", "WORKER", "MODEL",
                     "STATE", "WEIGHT", "RESIDENCY", "QUEUED", "OUTST.", "ERROR");
  for (const json& c : Array(s, "children")) {
    for (const json& m : Array(c, "models")) {
      out += fmt::format("{:<6} {:<20} {:<8} {:>7} {:<10} {:>7} {:>7}  {}\n", Text(c, "index"),
                         Text(m, "model"), Text(m, "state"), Text(m, "weight"),
                         Text(m, "residency"), Text(m, "queue_depth"), Text(m, "outstanding"),
                         m.contains("error") ? Text(m, "error") : "");
    }
  }
  return out;
}

std::string FormatMetrics(const json& metrics) {
  std::string out =
      fmt::format("{:<6} {:<20} {:>9} {:>10} {:>10} {:>8} {:>7} {:>6} {:>6} {:>6} {:>10} {:>9}\n",
                  "WORKER", "MODEL", "QUEUED", "SERVED", "ROWS", "PADDING", "DISP.", "REJ.", "SHED",
                  "FAIL", "COMPUTE(s)", "WAIT p99");
  for (const json& w : Array(metrics, "workers")) {
    for (const json& m : Array(w, "models")) {
      out += fmt::format(
          "{:<6} {:<20} {:>9} {:>10} {:>10} {:>8} {:>7} {:>6} {:>6} {:>6} {:>10.3f} {:>7}us\n",
          Text(w, "worker"), Text(m, "model"), Text(m, "queue_depth"), Text(m, "requests_served"),
          Text(m, "rows_served"), Text(m, "padding_rows"), Text(m, "dispatches"),
          Text(m, "rejected"), Text(m, "shed"),
          fmt::format("{}", Number(m, "failed") + Number(m, "errors")),
          Number(m, "compute_seconds"), Text(m, "queue_wait_p99_us"));
    }
  }
  return out;
}

std::string FormatControlStatus(const json& control) {
  std::string out;
  for (const json& w : Array(control, "workers")) {
    std::string budget;
    if (w.contains("weight_budget_bytes") && Number(w, "weight_budget_bytes") > 0) {
      budget = fmt::format(", weights {} of {} bytes", Text(w, "weight_resident_bytes"),
                           Text(w, "weight_budget_bytes"));
    }
    out += fmt::format("worker {} (slot {}): {}, discipline {}, residency mode {}{}\n",
                       Text(w, "worker"), Text(w, "slot"), Text(w, "state"), Text(w, "discipline"),
                       Text(w, "residency_mode"), budget);
    for (const json& m : Array(w, "models")) {
      std::string weights;
      if (m.contains("weight_bytes")) {
        weights = fmt::format("  {} bytes, {} loads, {} evictions", Text(m, "weight_bytes"),
                              Text(m, "weight_loads"), Text(m, "weight_evictions"));
        if (m.contains("last_weight_load_seconds_ago")) {
          weights +=
              fmt::format(", last load {:.1f}s ago", Number(m, "last_weight_load_seconds_ago"));
        }
      }
      out += fmt::format("  {:<20} {:<7} weight {:<6} {:<10} loaded {:<4} max batch {}{}{}\n",
                         Text(m, "model"), Text(m, "state"), Text(m, "weight"),
                         Text(m, "residency"), Text(m, "loaded"), Text(m, "effective_max_batch"),
                         weights, m.contains("error") ? "  error: " + Text(m, "error") : "");
    }
  }
  return out;
}

std::string FormatTop(const json& before, const json& after, double seconds) {
  struct Totals {
    double requests = 0, rows = 0, dispatches = 0, compute = 0, queued = 0, loads = 0;
  };
  auto sum = [](const json& metrics) {
    std::map<std::string, Totals> by_model;
    for (const json& w : Array(metrics, "workers")) {
      for (const json& m : Array(w, "models")) {
        Totals& t = by_model[Text(m, "model")];
        t.requests += Number(m, "requests_served");
        t.rows += Number(m, "rows_served");
        t.dispatches += Number(m, "dispatches");
        t.compute += Number(m, "compute_seconds");
        t.queued += Number(m, "queue_depth");
        t.loads += m.contains("weight_loads") ? Number(m, "weight_loads") : 0.0;
      }
    }
    return by_model;
  };
  std::map<std::string, Totals> a = sum(before);
  std::map<std::string, Totals> b = sum(after);
  double compute_total = 0;
  for (const auto& [name, t] : b) {
    compute_total += t.compute - a[name].compute;
  }
  std::string out = fmt::format("{:<20} {:>10} {:>10} {:>9} {:>8} {:>11} {:>8}\n", "MODEL", "REQ/s",
                                "ROWS/s", "BATCH", "QUEUED", "GPU SHARE", "LOADS/s");
  for (const auto& [name, t] : b) {
    const Totals& p = a[name];
    double dispatches = t.dispatches - p.dispatches;
    double compute = t.compute - p.compute;
    out += fmt::format("{:<20} {:>10.1f} {:>10.1f} {:>9.2f} {:>8.0f} {:>10.1f}% {:>8.2f}\n", name,
                       (t.requests - p.requests) / seconds, (t.rows - p.rows) / seconds,
                       dispatches > 0 ? (t.rows - p.rows) / dispatches : 0.0, t.queued,
                       compute_total > 0 ? 100 * compute / compute_total : 0.0,
                       (t.loads - p.loads) / seconds);
  }
  return out;
}

std::string FormatTenants(const json& reply) {
  std::string out =
      fmt::format("{:<16} {:>7} {:>9} {:>10} {:>10} {:>11} {:>7}  {:<24} {}\n", "TENANT", "WEIGHT",
                  "IN FLIGHT", "SERVED", "EXECUTED", "COMPUTE(s)", "SHARE", "REFUSED", "MODELS");
  for (const json& t : Array(reply, "tenants")) {
    std::string refused;
    if (t.contains("refused") && t["refused"].is_object()) {
      for (const auto& [code, n] : t["refused"].items()) {
        refused += (refused.empty() ? "" : " ") + code + "=" + n.dump();
      }
    }
    std::string models;
    for (const json& m : Array(t, "models")) {
      models += (models.empty() ? "" : ",") + (m.is_string() ? m.get<std::string>() : "?");
    }
    out += fmt::format("{:<16} {:>7} {:>9} {:>10} {:>10} {:>11.3f} {:>6.1f}%  {:<24} {}\n",
                       Text(t, "tenant"), Text(t, "weight"), Text(t, "in_flight"),
                       Text(t, "served"), Text(t, "executed"), Number(t, "compute_seconds"),
                       100 * Number(t, "compute_share"), refused.empty() ? "-" : refused,
                       models.empty() ? "-" : models);
  }
  return out;
}

}  // namespace ferry::ctl
