#include "supervisor/trace_exporter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "net/http_client.h"

namespace ferry::supervisor {

namespace {

using nlohmann::json;

constexpr int kTimeoutMs = 5000;
constexpr auto kLinger = std::chrono::milliseconds(200);  // Gathers a batch.
constexpr int64_t kWarnEveryNs = 10'000'000'000;
constexpr int64_t kMaxSpanNs = 3'600'000'000'000;  // A duration past this is a lie.

std::string Hex(uint64_t v, int digits) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0 && v != 0; --i, v >>= 4) {
    out[static_cast<size_t>(i)] = kDigits[v & 15];
  }
  return out;
}

int64_t Clamp(int64_t ns) { return std::clamp<int64_t>(ns, 0, kMaxSpanNs); }

json Attribute(const std::string& key, json value) {
  return {{"key", key},
          {"value", value.is_string() ? json{{"stringValue", value}}
                                      : json{{"intValue", std::to_string(value.get<int64_t>())}}}};
}

json Span(const std::string& trace, uint64_t id, uint64_t parent, const std::string& name, int kind,
          int64_t start, int64_t end, json attributes, bool error) {
  json span = {{"traceId", trace},
               {"spanId", Hex(id, 16)},
               {"name", name},
               {"kind", kind},
               {"startTimeUnixNano", std::to_string(start)},
               {"endTimeUnixNano", std::to_string(std::max(start, end))},
               {"attributes", std::move(attributes)},
               {"status", {{"code", error ? 2 : 1}}}};
  if (parent != 0) {
    span["parentSpanId"] = Hex(parent, 16);
  }
  return span;
}

// The five spans of one request.
void AddSpans(const ExportSpan& in, json* out) {
  const shm::TraceSpanData& d = in.data;
  std::string trace = Hex(d.trace_hi, 16) + Hex(d.trace_lo, 16);
  int64_t start = d.start_unix_ns;
  int64_t end = start + Clamp(d.total_ns);
  bool error = d.code != 0;
  json attributes = json::array({Attribute("ferry.model", in.model)});
  if (error) {
    attributes.push_back(Attribute("ferry.error_code", static_cast<int64_t>(d.code) - 1));
  }
  out->push_back(Span(trace, d.span, d.parent_span, "gateway", 2, start, end, attributes, error));
  // Laid end to end from the start: "pre" covers the checks and the preprocess plugin.
  const std::pair<const char*, int64_t> children[] = {
      {"pre", Clamp(d.validate_ns) + Clamp(d.preprocess_ns)},
      {"queue", Clamp(d.queue_ns)},
      {"compute", Clamp(d.compute_ns)},
      {"post", Clamp(d.postprocess_ns)}};
  int64_t at = start;
  uint64_t child = d.span;
  for (const auto& [name, length] : children) {
    int64_t to = std::min(at + length, end);
    child = child * 6364136223846793005ull + 1442695040888963407ull;  // Distinct ids per trace.
    out->push_back(Span(trace, child == 0 ? 1 : child, d.span, name, 1, at, to,
                        json::array({Attribute("ferry.model", in.model)}), false));
    at = to;
  }
}

}  // namespace

std::string OtlpJson(const std::vector<ExportSpan>& spans, const std::string& node) {
  json list = json::array();
  for (const ExportSpan& s : spans) {
    AddSpans(s, &list);
  }
  json resource = {{"attributes", json::array({Attribute("service.name", "ferry"),
                                               Attribute("host.name", node)})}};
  json body = {{"resourceSpans", json::array({{{"resource", resource},
                                               {"scopeSpans", json::array({{
                                                                  {"scope", {{"name", "ferry"}}},
                                                                  {"spans", std::move(list)},
                                                              }})}}})}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::pair<std::string, std::string>> ParseOtlpEndpoint(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return InvalidArgument("otlp_endpoint '" + url.substr(0, 128) +
                           "' must be http://HOST:PORT[/PATH] (a local collector)");
  }
  std::string rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string address = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "/v1/traces" : rest.substr(slash);
  size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon + 1 == address.size() ||
      address.find_first_of(" \t\r\n") != std::string::npos ||
      path.find_first_of(" \t\r\n") != std::string::npos) {
    return InvalidArgument("otlp_endpoint '" + url.substr(0, 128) +
                           "' must be http://HOST:PORT[/PATH]");
  }
  return std::make_pair(address, path);
}

TraceExporter::TraceExporter(std::string address, std::string path, std::string node)
    : address_(std::move(address)),
      path_(std::move(path)),
      node_(std::move(node)),
      thread_([this] { Run(); }) {}

TraceExporter::~TraceExporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TraceExporter::Push(std::vector<ExportSpan> spans) {
  if (spans.empty()) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (ExportSpan& s : spans) {
      if (queue_.size() >= kMaxQueuedSpans) {
        dropped_.fetch_add(1);
        continue;
      }
      queue_.push_back(std::move(s));
    }
  }
  wake_.notify_all();
}

void TraceExporter::Run() {
  std::optional<net::HttpClient> client;
  int64_t stop_deadline = 0;  // Once stopping: what is not sent by then is dropped.
  bool give_up = false;       // Stopping, and the collector failed: the rest is dropped.
  int64_t last_warning = 0;
  uint64_t unwarned = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_ && stop_deadline == 0) {
      stop_deadline = MonotonicNs() + int64_t{kTimeoutMs} * 1'000'000;
    }
    if (queue_.empty() || (stop_ && (give_up || MonotonicNs() > stop_deadline))) {
      dropped_.fetch_add(queue_.size());
      queue_.clear();
      return;
    }
    if (!stop_ && queue_.size() < kBatchSpans) {
      wake_.wait_for(lock, kLinger, [&] { return stop_ || queue_.size() >= kBatchSpans; });
    }
    size_t n = std::min(queue_.size(), kBatchSpans);
    std::vector<ExportSpan> batch(std::make_move_iterator(queue_.begin()),
                                  std::make_move_iterator(queue_.begin() + static_cast<long>(n)));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<long>(n));
    lock.unlock();
    Status sent = Send(batch, &client);
    if (sent.ok()) {
      exported_.fetch_add(n);
    } else {
      failed_.fetch_add(n);
      ++unwarned;
      if (MonotonicNs() - last_warning > kWarnEveryNs) {  // A collector down logs rarely.
        spdlog::warn("traces: {} batch(es) not taken by the collector at {} (last: {})", unwarned,
                     address_, sent.error().message);
        last_warning = MonotonicNs();
        unwarned = 0;
      }
    }
    lock.lock();
    give_up = stop_ && !sent.ok();
  }
}

Status TraceExporter::Send(const std::vector<ExportSpan>& batch,
                           std::optional<net::HttpClient>* client) {
  std::string body = OtlpJson(batch, node_);
  if (!*client || !(*client)->connected()) {
    FERRY_ASSIGN_OR_RETURN(net::HttpClient connected,
                           net::HttpClient::Connect(address_, kTimeoutMs));
    client->emplace(std::move(connected));
  }
  FERRY_ASSIGN_OR_RETURN(
      net::HttpAnswer answer,
      (*client)->Request("POST", path_, body, {{"Content-Type", "application/json"}}));
  if (answer.status / 100 != 2) {
    return Unavailable("HTTP " + std::to_string(answer.status));
  }
  return OkStatus();
}

}  // namespace ferry::supervisor
