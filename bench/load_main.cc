// ferry-load: a KServe v2 load generator, over HTTP (binary tensors or, with --encoding json,
// JSON bodies whose floats carry full precision; keep-alive connections) or
// gRPC (raw_input_contents, one channel per connection; the closed loop's calls driven on
// completion queues, load_grpc.h), for any server that speaks the protocol: ferry, and Triton
// in the same run for comparison.
//
//   ferry-load --url 127.0.0.1:8000 --model mlp --concurrency 1,8,32 --seconds 5 [--json]
//   ferry-load --url ... --model mlp --rate 2000 --seconds 5      (open loop)
//   ferry-load --protocol grpc --url 127.0.0.1:8001 ...           (gRPC ModelInfer)
//   ferry-load --encoding json ...                                (KServe JSON both ways)
//
// Closed loop: N connections, each sending its next request when the last is answered.
// Open loop (--rate): requests are due at a fixed rate over --connections connections, and
// each latency counts from when its request was due, so a slow server is not hidden by a
// client that waited for it (coordinated omission). Per level: requests/s, latency p50 / p99,
// errors by HTTP status or gRPC code, and, when the server reports them (ferry's response
// parameters), server overhead (total server time minus compute) p50 / p99 and the batch sizes
// requests ran in. Inputs come from the model's metadata (first input; --rows rows; random values).
// --model may repeat: requests alternate between the models, or, with --zipf S, go to model
// k (in the order given, from 0) in proportion to 1 / (k + 1)^S (open loop: each model a
// stream of its share of the rate over its own share of the connections, at least 2; closed
// loop: each request picks at random), and the report adds each model's figures. Every model's
// payload carries the same values (for the same input shape), so copies of one model must answer
// alike: --check compares every answer's outputs with the first answer to the same request body,
// whichever model gave it (relative 1e-4), counting a difference as a "mismatch" error.
#include <grpcpp/grpcpp.h>

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
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <variant>

#include "bench/load.h"
#include "bench/load_grpc.h"
#include "client/kserve_client.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"
#include "net/http_client.h"

namespace {

using ferry::bench::After;
using ferry::bench::Clock;
using ferry::bench::GrpcSample;
using ferry::bench::GrpcStub;
using ferry::bench::Level;
using ferry::bench::Payload;
using ferry::bench::Sample;
using ferry::net::HttpClient;
using nlohmann::json;

// One connection to the server: an HTTP keep-alive connection or a gRPC channel of its own
// (gRPC here with --zipf only; otherwise both loops over gRPC run in load_grpc.h).
struct Connection {
  std::optional<ferry::net::HttpClient> http;
  std::unique_ptr<inference::GRPCInferenceService::Stub> grpc;
};

// What a run does besides sending: which model each request goes to, and checking answers.
struct Mix {
  double zipf = 0;     // 0: alternate.
  bool check = false;  // Compare every answer with the first to the same body.
  // Per request body (its hash): the first answer's output bytes (HTTP binary), under mu.
  std::map<size_t, std::vector<uint8_t>> first;
  std::mutex mu;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// The model's first input as (name, datatype, shape) from its metadata.
struct InputMeta {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};

ferry::Result<InputMeta> HttpInputMeta(const std::string& url, const std::string& model) {
  FERRY_ASSIGN_OR_RETURN(HttpClient client, HttpClient::Connect(url));
  FERRY_ASSIGN_OR_RETURN(ferry::net::HttpAnswer meta, client.Request("GET", "/v2/models/" + model));
  json doc = json::parse(meta.body, nullptr, false);
  if (meta.status != 200 || !doc.is_object() || !doc.contains("inputs")) {
    return ferry::NotFound("model metadata of '" + model + "': HTTP " +
                           std::to_string(meta.status) + " " + meta.body.substr(0, 200));
  }
  const json& input = doc["inputs"][0];
  InputMeta m{input["name"].get<std::string>(), input["datatype"].get<std::string>(), {}};
  for (const json& d : input["shape"]) {
    m.shape.push_back(d.get<int64_t>());
  }
  return m;
}

ferry::Result<InputMeta> GrpcInputMeta(const std::string& url, const std::string& model) {
  inference::ModelMetadataRequest request;
  request.set_name(model);
  inference::ModelMetadataResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status status = GrpcStub(url)->ModelMetadata(&context, request, &response);
  if (!status.ok() || response.inputs_size() == 0) {
    return ferry::NotFound("model metadata of '" + model + "': gRPC " +
                           std::to_string(status.error_code()) + " " + status.error_message());
  }
  const auto& input = response.inputs(0);
  return InputMeta{input.name(), input.datatype(), {input.shape().begin(), input.shape().end()}};
}

// One request per model: the model's first input, `rows` rows, random values.
// The KServe JSON body of `t` (FP32), each value with the 9 significant digits that
// round-trip it (as curl users and most HTTP clients send), every output asked for as JSON.
ferry::client::InferBody JsonBody(const ferry::client::Tensor& t) {
  std::string body = R"({"inputs":[{"name":")" + t.name + R"(","datatype":"FP32","shape":[)";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    body += (i == 0 ? "" : ",") + std::to_string(t.shape[i]);
  }
  body += R"(],"data":[)";
  char buffer[32];
  for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) {
    float f;
    std::memcpy(&f, t.bytes.data() + i, 4);
    int n = std::snprintf(buffer, sizeof(buffer), "%s%.9g", i == 0 ? "" : ",", f);
    body.append(buffer, static_cast<size_t>(n));
  }
  body += "]}]}";
  return {std::move(body), {{"Content-Type", "application/json"}}};
}

ferry::Result<Payload> MakePayload(const std::string& url, bool grpc, bool json_body,
                                   const std::string& model, int rows, std::mt19937& rng) {
  FERRY_ASSIGN_OR_RETURN(InputMeta meta,
                         grpc ? GrpcInputMeta(url, model) : HttpInputMeta(url, model));
  ferry::client::Tensor t;
  t.name = meta.name;
  t.dtype = ferry::DTypeFromKServe(meta.datatype).value_or(ferry::DType::kF32);
  for (int64_t v : meta.shape) {
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
  Payload p{model, json_body ? JsonBody(t) : ferry::client::BuildInferBody({t}), {}};
  p.grpc.set_model_name(model);
  auto* input = p.grpc.add_inputs();
  input->set_name(t.name);
  input->set_datatype("FP32");
  for (int64_t d : t.shape) {
    input->add_shape(d);
  }
  p.grpc.add_raw_input_contents(std::string(t.bytes.begin(), t.bytes.end()));
  return p;
}

// One payload per model, each's values from a generator seeded alike.
ferry::Result<std::vector<Payload>> MakePayloads(const std::string& url, bool grpc, bool json_body,
                                                 const std::vector<std::string>& models, int rows) {
  std::vector<Payload> payloads;
  for (const std::string& m : models) {
    std::mt19937 rng(1);
    FERRY_ASSIGN_OR_RETURN(Payload p, MakePayload(url, grpc, json_body, m, rows, rng));
    payloads.push_back(std::move(p));
  }
  return payloads;
}

// Sends one request over HTTP; its sample, or what failed ("http 503", "connection").
// Whether `answer` matches the first answer to the same body (recording it if none yet).
bool Consistent(Mix& mix, const Payload& p, const ferry::net::HttpAnswer& answer) {
  ferry::Result<ferry::client::InferAnswer> read = ferry::client::ReadInferAnswer(answer);
  if (!read.ok() || read->outputs.empty()) {
    return false;
  }
  const std::vector<uint8_t>& got = read->outputs[0].bytes;
  std::lock_guard<std::mutex> lock(mix.mu);
  auto [it, inserted] = mix.first.try_emplace(std::hash<std::string>()(p.body.body), got);
  const std::vector<uint8_t>* want = &it->second;
  if (inserted) {
    return true;
  }
  if (want->size() != got.size()) {
    return false;
  }
  for (size_t i = 0; i + 4 <= got.size(); i += 4) {
    float a, b;
    std::memcpy(&a, got.data() + i, 4);
    std::memcpy(&b, want->data() + i, 4);
    if (!(std::fabs(a - b) <= 1e-4f * std::max(1.0f, std::fabs(b)))) {
      return false;
    }
  }
  return true;
}

// With `check`, the outputs are compared (Consistent) and a difference is a "mismatch".
std::variant<Sample, std::string> SendHttp(Connection& c, const std::string& url, const Payload& p,
                                           Clock::time_point due, Mix* check) {
  std::optional<HttpClient>& client = c.http;
  if (!client || !client->connected()) {
    ferry::Result<HttpClient> connected = HttpClient::Connect(url, 5000);
    if (!connected.ok()) {
      return std::string("connection");
    }
    client.emplace(std::move(*connected));
  }
  ferry::Result<ferry::net::HttpAnswer> a =
      client->Request("POST", "/v2/models/" + p.model + "/infer", p.body.body, p.body.headers);
  auto done = Clock::now();
  if (!a.ok()) {
    return std::string("connection");
  }
  if (a->status != 200) {
    return "http " + std::to_string(a->status);
  }
  if (check != nullptr && !Consistent(*check, p, *a)) {
    return std::string("mismatch");
  }
  Sample s{std::chrono::duration<double, std::micro>(done - due).count(), -1, -1, -1, 0};
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
      s.validate_us = params.value("validate_us", -1.0);
      s.queue_us = params.value("queue_us", -1.0);
    }
    s.batch = params.value("batch_size", int64_t{0});
  }
  return s;
}

// The same over gRPC ModelInfer ("grpc 14": the status code).
std::variant<Sample, std::string> SendGrpc(Connection& c, const std::string& url, const Payload& p,
                                           Clock::time_point due) {
  if (!c.grpc) {
    c.grpc = GrpcStub(url);
  }
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status status = c.grpc->ModelInfer(&context, p.grpc, &response);
  auto done = Clock::now();
  if (!status.ok()) {
    return "grpc " + std::to_string(status.error_code());
  }
  return GrpcSample(response, due, done);
}

// Open loop with --zipf: each model its own stream at its share of the rate, over its own
// connections (its share of them, at least 2), so a model whose requests wait long (for a
// load) never holds the connections another model's requests are due on.
struct Streams {
  std::vector<size_t> model;  // Per thread: its model.
  std::vector<int> threads;   // Per model: its threads.
  std::vector<int> index;     // Per thread: its index among its model's threads.
};

Streams MakeStreams(const std::vector<double>& popularity, int connections) {
  Streams s;
  double total = std::accumulate(popularity.begin(), popularity.end(), 0.0);
  for (size_t k = 0; k < popularity.size(); ++k) {
    int n = std::max(2, static_cast<int>(std::lround(connections * popularity[k] / total)));
    s.threads.push_back(n);
    for (int j = 0; j < n; ++j) {
      s.model.push_back(k);
      s.index.push_back(j);
    }
  }
  return s;
}

Level Run(const std::string& url, bool grpc, const std::vector<Payload>& payloads, bool open_loop,
          double offered, int connections, double seconds, double warmup, Mix& mix) {
  Level level;
  level.mode = open_loop ? "rate" : "concurrency";
  std::vector<double> popularity(payloads.size(), 1.0);
  for (size_t k = 0; k < payloads.size(); ++k) {
    popularity[k] = 1.0 / std::pow(static_cast<double>(k + 1), mix.zipf);
  }
  level.offered = offered;
  int threads = open_loop ? connections : static_cast<int>(offered);
  double total_popularity = std::accumulate(popularity.begin(), popularity.end(), 0.0);
  bool streams = open_loop && mix.zipf > 0;
  Streams s = streams ? MakeStreams(popularity, connections) : Streams{};
  if (streams) {
    threads = static_cast<int>(s.model.size());
  }
  const std::vector<size_t>& stream_model = s.model;
  const std::vector<int>& stream_threads = s.threads;
  const std::vector<int>& stream_index = s.index;
  std::mutex mu;
  auto start = Clock::now();
  auto measure_from = After(start, warmup);
  auto end = After(measure_from, seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Connection connection;
      std::mt19937 pick(static_cast<unsigned>(t) + 1);
      std::discrete_distribution<size_t> zipf(popularity.begin(), popularity.end());
      std::vector<Sample> mine;
      std::map<std::string, uint64_t> errors;
      // Open loop: this connection's share of the schedule, due every threads/rate seconds
      // (with streams: its model's threads over the model's share of the rate).
      double period = open_loop ? static_cast<double>(threads) / offered : 0;
      double offset = period * t / threads;
      if (streams) {
        size_t model = stream_model[static_cast<size_t>(t)];
        int n = stream_threads[model];
        period = n / (offered * popularity[model] / total_popularity);
        offset = period * stream_index[static_cast<size_t>(t)] / n;
      }
      for (uint64_t k = 0;; ++k) {
        Clock::time_point due = Clock::now();
        if (open_loop) {
          due = After(start, offset + period * static_cast<double>(k));
          std::this_thread::sleep_until(due);
        }
        if (due >= end) {
          break;
        }
        size_t chosen = streams        ? stream_model[static_cast<size_t>(t)]
                        : mix.zipf > 0 ? zipf(pick)
                                       : (static_cast<size_t>(t) + k) % payloads.size();
        const Payload& p = payloads[chosen];
        auto result = grpc ? SendGrpc(connection, url, p, due)
                           : SendHttp(connection, url, p, due, mix.check ? &mix : nullptr);
        if (Sample* s = std::get_if<Sample>(&result)) {
          s->model = chosen;
        }
        if (due < measure_from) {
          continue;
        }
        if (const Sample* s = std::get_if<Sample>(&result)) {
          mine.push_back(*s);
        } else {
          ++errors[std::get<std::string>(result)];
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      level.samples.insert(level.samples.end(), mine.begin(), mine.end());
      for (const auto& [what, n] : errors) {
        level.errors[what] += n;
      }
    });
  }
  for (std::thread& t : pool) {
    t.join();
  }
  level.seconds = seconds;
  return level;
}

json Report(const Level& level, const std::vector<Payload>& payloads, bool per_model) {
  std::vector<double> latency, overhead, validate, queue, hand_offs;
  std::map<int64_t, uint64_t> batches;
  for (const Sample& s : level.samples) {
    latency.push_back(s.latency_us);
    if (s.overhead_us >= 0) {
      overhead.push_back(s.overhead_us);
    }
    if (s.overhead_us >= 0 && s.validate_us >= 0 && s.queue_us >= 0) {
      validate.push_back(s.validate_us);
      queue.push_back(s.queue_us);
      hand_offs.push_back(s.overhead_us - s.validate_us - s.queue_us);
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
  for (const auto& [what, n] : level.errors) {
    errors[what] = n;
  }
  out["errors"] = errors;
  if (!overhead.empty()) {
    out["overhead_us_p50"] = Percentile(overhead, 0.50);
    out["overhead_us_p99"] = Percentile(overhead, 0.99);
  }
  if (!hand_offs.empty()) {  // Medians of each part: they need not add up to the overhead's.
    out["overhead_parts_us_p50"] = {{"validate", Percentile(validate, 0.50)},
                                    {"queue", Percentile(queue, 0.50)},
                                    {"hand_offs_and_join", Percentile(hand_offs, 0.50)}};
  }
  json hist = json::object();
  for (auto [b, n] : batches) {
    hist[std::to_string(b)] = n;
  }
  out["batch_sizes"] = hist;
  if (per_model) {
    std::vector<std::vector<double>> by_model(payloads.size());
    for (const Sample& s : level.samples) {
      by_model[s.model].push_back(s.latency_us);
    }
    json models = json::array();
    for (size_t k = 0; k < payloads.size(); ++k) {
      models.push_back({{"model", payloads[k].model},
                        {"requests", by_model[k].size()},
                        {"latency_us_p50", Percentile(by_model[k], 0.50)},
                        {"latency_us_p99", Percentile(by_model[k], 0.99)}});
    }
    out["per_model"] = models;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-load: KServe v2 load generator, HTTP or gRPC (closed loop or open loop)"};
  std::string url = "127.0.0.1:8000";
  std::string protocol = "http";
  std::string encoding = "binary";
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
  app.add_option("--encoding", encoding, "HTTP bodies: binary or json")
      ->check(CLI::IsMember({"binary", "json"}))
      ->capture_default_str();
  app.add_option("--protocol", protocol, "http or grpc")
      ->check(CLI::IsMember({"http", "grpc"}))
      ->capture_default_str();
  app.add_option("--model", models, "model(s); requests alternate")->capture_default_str();
  app.add_option("--concurrency", concurrency, "closed-loop levels")->delimiter(',');
  app.add_option("--rate", rate, "open loop: requests per second (overrides --concurrency)");
  app.add_option("--connections", connections, "open loop: connections")->capture_default_str();
  app.add_option("--rows", rows, "rows per request")->capture_default_str();
  app.add_option("--seconds", seconds, "measured seconds per level")->capture_default_str();
  app.add_option("--warmup", warmup, "unmeasured seconds before each level")->capture_default_str();
  app.add_option("--label", label, "names the server in the output")->capture_default_str();
  app.add_flag("--json", as_json, "one JSON object");
  int grpc_threads = 1;
  app.add_option("--grpc-threads", grpc_threads,
                 "closed loop over gRPC: threads, each with a completion queue")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  Mix mix;
  app.add_option("--zipf", mix.zipf,
                 "pick models by Zipf popularity with this exponent (0: alternate)")
      ->check(CLI::Range(0.0, 10.0));
  app.add_flag("--check", mix.check, "HTTP binary: compare each answer with its payload's first");
  CLI11_PARSE(app, argc, argv);
  bool grpc = protocol == "grpc";
  ferry::Result<std::vector<Payload>> payloads =
      MakePayloads(url, grpc, encoding == "json", models, rows);
  if (!payloads.ok()) {
    std::cerr << "ferry-load: " << payloads.error().ToString() << "\n";
    return 1;
  }
  json levels = json::array();
  bool per_model = payloads->size() > 1;
  if (rate > 0) {
    Level level =
        grpc && mix.zipf == 0
            ? ferry::bench::RunGrpcOpenLoop(url, *payloads, rate, connections, seconds, warmup)
            : Run(url, grpc, *payloads, true, rate, connections, seconds, warmup, mix);
    levels.push_back(Report(level, *payloads, per_model));
  } else {
    for (int c : concurrency) {
      Level level =
          grpc && mix.zipf == 0
              ? ferry::bench::RunGrpcClosedLoop(url, *payloads, c, grpc_threads, seconds, warmup)
              : Run(url, grpc, *payloads, false, c, 0, seconds, warmup, mix);
      levels.push_back(Report(level, *payloads, per_model));
    }
  }
  json out = {{"server", label},  {"url", url},   {"protocol", protocol}, {"encoding", encoding},
              {"models", models}, {"rows", rows}, {"levels", levels}};
  if (as_json) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("%s (%s %s, %s), %d row(s) per request\n", label.c_str(), protocol.c_str(),
              grpc ? "protobuf" : encoding.c_str(), url.c_str(), rows);
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
