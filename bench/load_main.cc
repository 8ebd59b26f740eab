// ferry-load: a KServe v2 HTTP load generator (binary tensors, keep-alive connections) for any
// server that speaks the protocol: ferry, and Triton in the same run for comparison.
//
//   ferry-load --url 127.0.0.1:8000 --model mlp --concurrency 1,8,32 --seconds 5 [--json]
//   ferry-load --url ... --model mlp --rate 2000 --seconds 5      (open loop)
//
// Closed loop: N connections, each sending its next request when the last is answered.
// Open loop (--rate): requests are due at a fixed rate over --connections connections, and
// each latency counts from when its request was due, so a slow server is not hidden by a
// client that waited for it (coordinated omission). Per level: requests/s, latency p50 / p99,
// errors by HTTP status, and, when the server reports them (ferry's response parameters),
// server overhead (total server time minus compute) p50 / p99 and the batch sizes requests
// ran in. Inputs come from the model's metadata (first input; --rows rows; random values).
// --model may repeat: requests alternate between the models.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "frontend/http_client.h"
#include "frontend/kserve_client.h"

namespace {

using ferry::frontend::HttpClient;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Payload {
  std::string model;
  ferry::frontend::InferBody body;
};

struct Sample {
  double latency_us;
  double overhead_us;  // < 0 when the server does not report it.
  int64_t batch;
};

struct Level {
  std::string mode;
  double offered = 0;  // Concurrency, or requests/s for open loop.
  double seconds = 0;
  std::vector<Sample> samples;
  std::map<int, uint64_t> errors;  // HTTP status (0: connection) -> count.
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// One request's body per model: the model's first input, `rows` rows, random values.
ferry::Result<Payload> MakePayload(const std::string& url, const std::string& model, int rows,
                                   std::mt19937& rng) {
  FERRY_ASSIGN_OR_RETURN(HttpClient client, HttpClient::Connect(url));
  FERRY_ASSIGN_OR_RETURN(ferry::frontend::HttpAnswer meta,
                         client.Request("GET", "/v2/models/" + model));
  json doc = json::parse(meta.body, nullptr, false);
  if (meta.status != 200 || !doc.is_object() || !doc.contains("inputs")) {
    return ferry::NotFound("model metadata of '" + model + "': HTTP " +
                           std::to_string(meta.status) + " " + meta.body.substr(0, 200));
  }
  const json& input = doc["inputs"][0];
  ferry::frontend::Tensor t;
  t.name = input["name"].get<std::string>();
  t.dtype =
      ferry::DTypeFromKServe(input["datatype"].get<std::string>()).value_or(ferry::DType::kF32);
  for (const json& d : input["shape"]) {
    int64_t v = d.get<int64_t>();
    t.shape.push_back(v < 0 ? rows : v);
  }
  std::optional<uint64_t> bytes = ferry::TensorByteSize(t.dtype, t.shape);
  if (!bytes || t.dtype != ferry::DType::kF32) {
    return ferry::InvalidArgument("only FP32 inputs are generated");
  }
  t.bytes.resize(*bytes);
  std::uniform_real_distribution<float> value(-1, 1);
  for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) {
    float f = value(rng);
    std::memcpy(t.bytes.data() + i, &f, 4);
  }
  return Payload{model, ferry::frontend::BuildInferBody({t})};
}

// Sends one request; its sample, or the HTTP status of its failure (0: no answer).
std::variant<Sample, int> Send(std::optional<HttpClient>& client, const std::string& url,
                               const Payload& p, Clock::time_point due) {
  if (!client || !client->connected()) {
    ferry::Result<HttpClient> c = HttpClient::Connect(url, 5000);
    if (!c.ok()) {
      return 0;
    }
    client.emplace(std::move(*c));
  }
  ferry::Result<ferry::frontend::HttpAnswer> a =
      client->Request("POST", "/v2/models/" + p.model + "/infer", p.body.body, p.body.headers);
  auto done = Clock::now();
  if (!a.ok()) {
    return 0;
  }
  if (a->status != 200) {
    return a->status;
  }
  Sample s{std::chrono::duration<double, std::micro>(done - due).count(), -1, 0};
  // The parameters only: the JSON part of the body.
  size_t json_bytes = a->body.size();
  if (const std::string* h = a->Header("Inference-Header-Content-Length")) {
    json_bytes = std::min<size_t>(std::strtoull(h->c_str(), nullptr, 10), a->body.size());
  }
  json doc = json::parse(a->body.begin(), a->body.begin() + static_cast<std::ptrdiff_t>(json_bytes),
                         nullptr, false);
  if (doc.is_object() && doc.contains("parameters") && doc["parameters"].is_object()) {
    const json& params = doc["parameters"];
    if (params.contains("total_server_us") && params.contains("compute_us")) {
      s.overhead_us = params["total_server_us"].get<double>() - params["compute_us"].get<double>();
    }
    s.batch = params.value("batch_size", int64_t{0});
  }
  return s;
}

Level Run(const std::string& url, const std::vector<Payload>& payloads, bool open_loop,
          double offered, int connections, double seconds, double warmup) {
  Level level;
  level.mode = open_loop ? "rate" : "concurrency";
  level.offered = offered;
  int threads = open_loop ? connections : static_cast<int>(offered);
  std::mutex mu;
  auto start = Clock::now();
  auto measure_from =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup));
  auto end = measure_from +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::optional<HttpClient> client;
      std::vector<Sample> mine;
      std::map<int, uint64_t> errors;
      // Open loop: this connection's share of the schedule, due every threads/rate seconds.
      double period = open_loop ? static_cast<double>(threads) / offered : 0;
      auto offset = std::chrono::duration<double>(period * t / threads);
      for (uint64_t k = 0;; ++k) {
        Clock::time_point due = Clock::now();
        if (open_loop) {
          due =
              start + std::chrono::duration_cast<Clock::duration>(
                          offset + std::chrono::duration<double>(period * static_cast<double>(k)));
          std::this_thread::sleep_until(due);
        }
        if (due >= end) {
          break;
        }
        const Payload& p = payloads[(static_cast<size_t>(t) + k) % payloads.size()];
        auto result = Send(client, url, p, due);
        if (due < measure_from) {
          continue;
        }
        if (const Sample* s = std::get_if<Sample>(&result)) {
          mine.push_back(*s);
        } else {
          ++errors[std::get<int>(result)];
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      level.samples.insert(level.samples.end(), mine.begin(), mine.end());
      for (auto [status, n] : errors) {
        level.errors[status] += n;
      }
    });
  }
  for (std::thread& t : pool) {
    t.join();
  }
  level.seconds = seconds;
  return level;
}

json Report(const Level& level) {
  std::vector<double> latency, overhead;
  std::map<int64_t, uint64_t> batches;
  for (const Sample& s : level.samples) {
    latency.push_back(s.latency_us);
    if (s.overhead_us >= 0) {
      overhead.push_back(s.overhead_us);
    }
    if (s.batch > 0) {
      ++batches[s.batch];
    }
  }
  json out = {{"mode", level.mode},
              {"offered", level.offered},
              {"requests", level.samples.size()},
              {"throughput_rps", static_cast<double>(level.samples.size()) / level.seconds},
              {"latency_us_p50", Percentile(latency, 0.50)},
              {"latency_us_p99", Percentile(latency, 0.99)}};
  json errors = json::object();
  for (auto [status, n] : level.errors) {
    errors[std::to_string(status)] = n;
  }
  out["errors"] = errors;
  if (!overhead.empty()) {
    out["overhead_us_p50"] = Percentile(overhead, 0.50);
    out["overhead_us_p99"] = Percentile(overhead, 0.99);
  }
  json hist = json::object();
  for (auto [b, n] : batches) {
    hist[std::to_string(b)] = n;
  }
  out["batch_sizes"] = hist;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-load: KServe v2 HTTP load generator (closed loop or open loop)"};
  std::string url = "127.0.0.1:8000";
  std::vector<std::string> models = {"mlp"};
  std::vector<int> concurrency = {1, 8, 32};
  double rate = 0;
  int connections = 64;
  int rows = 1;
  double seconds = 3;
  double warmup = 1;
  bool as_json = false;
  std::string label = "server";
  app.add_option("--url", url, "HOST:PORT of the server")->capture_default_str();
  app.add_option("--model", models, "model(s); requests alternate")->capture_default_str();
  app.add_option("--concurrency", concurrency, "closed-loop levels")->delimiter(',');
  app.add_option("--rate", rate, "open loop: requests per second (overrides --concurrency)");
  app.add_option("--connections", connections, "open loop: connections")->capture_default_str();
  app.add_option("--rows", rows, "rows per request")->capture_default_str();
  app.add_option("--seconds", seconds, "measured seconds per level")->capture_default_str();
  app.add_option("--warmup", warmup, "unmeasured seconds before each level")->capture_default_str();
  app.add_option("--label", label, "names the server in the output")->capture_default_str();
  app.add_flag("--json", as_json, "one JSON object");
  CLI11_PARSE(app, argc, argv);
  std::mt19937 rng(1);
  std::vector<Payload> payloads;
  for (const std::string& m : models) {
    ferry::Result<Payload> p = MakePayload(url, m, rows, rng);
    if (!p.ok()) {
      std::cerr << "ferry-load: " << p.error().ToString() << "\n";
      return 1;
    }
    payloads.push_back(std::move(*p));
  }
  json levels = json::array();
  if (rate > 0) {
    levels.push_back(Report(Run(url, payloads, true, rate, connections, seconds, warmup)));
  } else {
    for (int c : concurrency) {
      levels.push_back(Report(Run(url, payloads, false, c, 0, seconds, warmup)));
    }
  }
  json out = {
      {"server", label}, {"url", url}, {"models", models}, {"rows", rows}, {"levels", levels}};
  if (as_json) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("%s (%s), %d row(s) per request\n", label.c_str(), url.c_str(), rows);
  std::printf("%-12s %9s %10s %10s %10s %12s %12s  %s\n", "level", "req/s", "p50 us", "p99 us",
              "errors", "overhead p50", "overhead p99", "batch sizes");
  for (const json& l : levels) {
    uint64_t errors = 0;
    for (const auto& [k, v] : l["errors"].items()) {
      errors += v.get<uint64_t>();
    }
    std::string batches;
    for (const auto& [k, v] : l["batch_sizes"].items()) {
      batches += k + ":" + std::to_string(v.get<uint64_t>()) + " ";
    }
    std::string name = (l["mode"] == "rate" ? "rate " : "conc ") +
                       std::to_string(static_cast<int64_t>(l["offered"].get<double>()));
    std::printf(
        "%-12s %9.0f %10.0f %10.0f %10llu %12s %12s  %s\n", name.c_str(),
        l["throughput_rps"].get<double>(), l["latency_us_p50"].get<double>(),
        l["latency_us_p99"].get<double>(), static_cast<unsigned long long>(errors),
        l.contains("overhead_us_p50") ? std::to_string(l["overhead_us_p50"].get<int64_t>()).c_str()
                                      : "-",
        l.contains("overhead_us_p99") ? std::to_string(l["overhead_us_p99"].get<int64_t>()).c_str()
                                      : "-",
        batches.c_str());
  }
  return 0;
}
