// The node as clients see it: ferryd started on CPU workers, requests over HTTP (the KServe v2
// front end in the hook hosts), outputs compared with CpuBackend run directly; errors as
// clients see them, and ferryctl infer.
#include <doctest/doctest.h>

#include "tests/testing/node_samples.h"

namespace ferry::testing {
namespace {

TEST_CASE("1,000 concurrent requests over 2 models through HTTP, every output exact") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  std::string address = HttpAddress(ferryd);
  Direct direct(dir / "models");
  constexpr int kThreads = 20;
  constexpr int kPerThread = 50;
  std::atomic<int> exact{0}, wrong{0}, failed{0};
  std::mutex mu;
  std::string first_failure;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      Result<HttpClient> client = HttpClient::Connect(address);
      for (int i = 0; i < kPerThread && client.ok(); ++i) {
        Sample s = MakeSample(rng);
        Result<client::InferAnswer> r = Send(*client, s);
        if (!r.ok()) {
          ++failed;
          std::lock_guard<std::mutex> lock(mu);
          first_failure = r.error().ToString();
          continue;
        }
        bool same = r->outputs.size() == 1 && r->outputs[0].shape == Shape{s.rows, 10} &&
                    SameFloats(r->outputs[0].bytes, direct.Run(s.model, s.rows, s.input));
        ++(same ? exact : wrong);
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  CHECK_MESSAGE(failed.load() == 0, first_failure);
  CHECK(wrong.load() == 0);
  CHECK(exact.load() == kThreads * kPerThread);
  // The node saw them all, and batched some (snapshots are published every few ms).
  uint64_t served = 0;
  uint64_t dispatches = 0;
  for (int i = 0; i < 100 && served != kThreads * kPerThread; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Result<json> metrics = ferryd.Call(control::Command::kSchedulerMetrics);
    REQUIRE(metrics.ok());
    served = 0;
    dispatches = 0;
    for (const json& w : (*metrics)["workers"]) {
      for (const json& m : w["models"]) {
        served += m["requests_served"].get<uint64_t>();
        dispatches += m["dispatches"].get<uint64_t>();
      }
    }
  }
  CHECK(served == kThreads * kPerThread);
  CHECK(dispatches < served);
  // /metrics: the histograms agree with the counters: every request's queue wait and every
  // dispatch's batch size counted once, buckets cumulative, +Inf = _count.
  Result<json> status = ferryd.Status();
  REQUIRE(status.ok());
  Result<HttpClient> scrape =
      HttpClient::Connect((*status)["listen"]["metrics"].get<std::string>());
  REQUIRE(scrape.ok());
  Result<net::HttpAnswer> page = scrape->Request("GET", "/metrics");
  REQUIRE(page.ok());
  std::map<std::string, double> sums;  // Family suffix -> summed over models and gpus.
  std::map<std::string, double> last_bucket;
  bool monotone = true;
  std::istringstream lines(page->body);
  for (std::string line; std::getline(lines, line);) {
    for (const char* family : {"ferry_queue_wait_seconds", "ferry_batch_size"}) {
      std::string f(family);
      if (line.rfind(f + "_", 0) != 0) continue;
      std::string series = line.substr(0, line.rfind(' '));
      double value = std::stod(line.substr(line.rfind(' ') + 1));
      std::string suffix = line.substr(f.size(), line.find('{') - f.size());
      if (suffix == "_bucket") {
        size_t le = series.find("le=\"");
        std::string key = series.substr(0, le) + series.substr(series.find('"', le + 4) + 1);
        monotone = monotone && value >= last_bucket[key];
        last_bucket[key] = value;
        if (series.find("le=\"+Inf\"") != std::string::npos) sums[f + "_inf"] += value;
      } else {
        sums[f + suffix] += value;
      }
    }
  }
  CHECK(monotone);
  CHECK(sums["ferry_queue_wait_seconds_count"] == kThreads * kPerThread);
  CHECK(sums["ferry_queue_wait_seconds_inf"] == kThreads * kPerThread);
  CHECK(sums["ferry_queue_wait_seconds_sum"] > 0);
  CHECK(sums["ferry_batch_size_count"] == static_cast<double>(dispatches));
  CHECK(sums["ferry_batch_size_inf"] == static_cast<double>(dispatches));
  CHECK(sums["ferry_batch_size_sum"] >= static_cast<double>(dispatches));
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

TEST_CASE("errors through HTTP: unknown model, bad tensors, deadline, wrong method") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode,
                       kSettings + std::string("[frontend]\nmax_request_bytes = 100000\n"
                                               "tenants = [\"acme\", \"globex\"]\n"));
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  auto post = [&](const std::string& target, const std::string& body) {
    Result<net::HttpAnswer> a = client->Request("POST", target, body);
    if (!client->connected()) {
      client = HttpClient::Connect(HttpAddress(ferryd));
    }
    REQUIRE(a.ok());
    return *a;
  };
  // One MLP row of zeros as JSON, without the closing brace (parameters may follow).
  std::string one_row = R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[0)";
  for (int i = 1; i < 784; ++i) {
    one_row += ",0";
  }
  one_row += "]}]";
  net::HttpAnswer a = post("/v2/models/nosuch/infer", one_row + "}");
  CHECK(a.status == 404);
  CHECK(a.body.find("unknown model 'nosuch'") != std::string::npos);
  a = post("/v2/models/mlp/infer",
           R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]})");
  CHECK(a.status == 400);
  CHECK(a.body.find("expected FP32 [-1, 784]") != std::string::npos);
  a = post("/v2/models/mlp/infer",
           R"({"inputs":[{"name":"wrong","datatype":"FP32","shape":[1,784],"data":[]}]})");
  CHECK(a.status == 400);
  a = post("/v2/models/mlp/infer", "{not json");
  CHECK(a.status == 400);
  a = post("/v2/models/mlp/infer", std::string(200000, ' '));
  CHECK(a.status == 413);
  // A 1 us deadline cannot be met: shed at the worker (or refused before), 504.
  a = post("/v2/models/mlp/infer", one_row + R"(,"parameters":{"timeout":1}})");
  CHECK(a.status == 504);
  a = post("/v2/models/mlp/infer", one_row + "}");
  CHECK(a.status == 200);
  // Priority: a level or 0; tenant: a declared one, by parameter or header (agreeing).
  a = post("/v2/models/mlp/infer", one_row + R"(,"parameters":{"priority":4}})");
  CHECK(a.status == 400);
  CHECK(a.body.find("parameter \\\"priority\\\" is 4: 0 (the default level) or 1") !=
        std::string::npos);
  a = post("/v2/models/mlp/infer", one_row + R"(,"parameters":{"priority":1,"tenant":"acme"}})");
  CHECK(a.status == 200);
  a = post("/v2/models/mlp/infer", one_row + R"(,"parameters":{"tenant":"initech"}})");
  CHECK(a.status == 400);
  CHECK(a.body.find("tenant 'initech' is not declared in the node file's [frontend] tenants "
                    "(acme, globex)") != std::string::npos);
  a = post("/v2/models/mlp/infer", one_row + R"(,"parameters":{"tenant":7}})");
  CHECK(a.status == 400);
  Result<net::HttpAnswer> tagged =
      client->Request("POST", "/v2/models/mlp/infer", one_row + "}", {{"Ferry-Tenant", "globex"}});
  REQUIRE(tagged.ok());
  CHECK(tagged->status == 200);
  tagged = client->Request("POST", "/v2/models/mlp/infer",
                           one_row + R"(,"parameters":{"tenant":"acme"}})",
                           {{"Ferry-Tenant", "globex"}});
  REQUIRE(tagged.ok());
  CHECK(tagged->status == 400);
  // /metrics counts every answer by model, tenant and code, and the workers' time by tenant.
  Result<json> status = ferryd.Status();
  REQUIRE(status.ok());
  Result<HttpClient> metrics_client =
      HttpClient::Connect((*status)["listen"]["metrics"].get<std::string>());
  REQUIRE(metrics_client.ok());
  // The workers' counts are in their status snapshots, published every 5 ms.
  auto acme_requests = [](const std::string& text) {
    double total = 0;
    for (const char* gpu : {"0", "1"}) {
      std::string key =
          std::string("ferry_tenant_requests_total{gpu=\"") + gpu + "\",tenant=\"acme\"} ";
      size_t at = text.find(key);
      REQUIRE(at != std::string::npos);
      total += std::stod(text.substr(at + key.size()));
    }
    return total;
  };
  Result<net::HttpAnswer> metrics = metrics_client->Request("GET", "/metrics");
  REQUIRE(metrics.ok());
  for (int i = 0; i < 100 && acme_requests(metrics->body) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    metrics = metrics_client->Request("GET", "/metrics");
    REQUIRE(metrics.ok());
  }
  CHECK(acme_requests(metrics->body) == 1);
  for (const char* line :
       {"ferry_frontend_requests_total{code=\"OK\",model=\"mlp\",tenant=\"acme\"} 1",
        "ferry_frontend_requests_total{code=\"OK\",model=\"mlp\",tenant=\"globex\"} 1",
        "ferry_frontend_requests_total{code=\"OK\",model=\"mlp\"} 1",
        "ferry_frontend_requests_total{code=\"DEADLINE_EXCEEDED\",model=\"mlp\"} 1",
        "ferry_frontend_unrouted_requests_total{code=\"NOT_FOUND\"} 1",
        "ferry_frontend_plugin_seconds_total{model=\"cnn\",tenant=\"globex\"} 0",
        "ferry_requests_total{gpu=\"0\",model=\"mlp\",outcome=\"cancelled\"} 0"}) {
    CHECK_MESSAGE(metrics->body.find(line) != std::string::npos, line);
  }
  // Bad tensors, bad JSON, a bad priority, an undeclared tenant, a mistyped one, a mismatch.
  CHECK(metrics->body.find(
            "ferry_frontend_requests_total{code=\"INVALID_ARGUMENT\",model=\"mlp\"} 7") !=
        std::string::npos);
  WriteFile(dir / "metrics.txt", metrics->body);
  std::string promtool = "promtool check metrics < " + (dir / "metrics.txt") + " > " +
                         (dir / "promtool.txt") + " 2>&1";
  int promtool_status = std::system(promtool.c_str());
  CHECK_MESSAGE(WEXITSTATUS(promtool_status) == 0, ReadFileText(dir / "promtool.txt"));
  Result<net::HttpAnswer> get = client->Request("GET", "/v2/models/mlp/infer");
  REQUIRE(get.ok());
  CHECK(get->status == 405);
  get = client->Request("GET", "/v2/models/mlp/versions/7");
  REQUIRE(get.ok());
  CHECK(get->status == 404);
  get = client->Request("GET", "/v2/models/mlp/versions/1/ready");
  REQUIRE(get.ok());
  CHECK(get->status == 200);
  // (After the counts above, which these answers would change.) A W3C traceparent (the header's
  // name in any case) is echoed on the answer, on a refusal and on an unknown model's 404; an
  // invalid one (uppercase hex) is ignored.
  const std::string trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  for (const auto& [target, body, code] :
       {std::tuple{"/v2/models/mlp/infer", one_row + "}", 200},
        std::tuple{"/v2/models/mlp/infer", one_row + R"(,"parameters":{"priority":4}})", 400},
        std::tuple{"/v2/models/nosuch/infer", one_row + "}", 404}}) {
    Result<net::HttpAnswer> traced =
        client->Request("POST", target, body, {{"TraceParent", trace}});
    REQUIRE(traced.ok());
    CHECK(traced->status == code);
    REQUIRE(traced->Header("traceparent") != nullptr);
    CHECK(*traced->Header("traceparent") == trace);
  }
  std::string upper = trace;
  upper[3] = 'B';
  Result<net::HttpAnswer> untraced =
      client->Request("POST", "/v2/models/mlp/infer", one_row + "}", {{"traceparent", upper}});
  REQUIRE(untraced.ok());
  CHECK(untraced->status == 200);
  CHECK(untraced->Header("traceparent") == nullptr);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

// Whether every worker lists `model` with `state` (or, state empty, lists it not at all), the
// node is ready and no hook host is still restarting for a model change.

TEST_CASE("ferryctl infer: a .npy input through the node, the output written as .npy") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  Direct direct(dir / "models");
  std::mt19937 rng(9);
  Sample s = MakeSample(rng);
  s.model = "mlp";
  s.rows = 3;
  s.shape = {3, 784};
  s.input.resize(3 * 784 * 4);
  WriteFile(dir / "x.npy", ctl::EncodeNpy({"input", DType::kF32, s.shape, s.input}));
  std::filesystem::create_directories(dir / "out");
  std::string command = std::string(FERRY_FERRYCTL_BINARY) + " --socket " + ferryd.socket() +
                        " infer mlp --input " + (dir / "x.npy") + " --deadline-ms 5000" +
                        " --output-dir " + (dir / "out") + " > " + (dir / "stdout") + " 2>&1";
  int status = std::system(command.c_str());
  INFO(ReadFileText(dir / "stdout"));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(ReadFileText(dir / "stdout").find("logits FP32 [3,10]") != std::string::npos);
  Result<client::Tensor> out = ctl::ReadNpy(dir / "out/logits.npy", "logits");
  REQUIRE(out.ok());
  CHECK(out->shape == Shape{3, 10});
  CHECK(SameFloats(out->bytes, direct.Run("mlp", 3, s.input)));
  // A model the node does not have, and a file that is not .npy: refused, named.
  command = std::string(FERRY_FERRYCTL_BINARY) + " --socket " + ferryd.socket() +
            " infer nosuch --input " + (dir / "x.npy") + " > " + (dir / "stdout") + " 2>&1";
  status = std::system(command.c_str());
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(ReadFileText(dir / "stdout").find("unknown model 'nosuch'") != std::string::npos);
  command = std::string(FERRY_FERRYCTL_BINARY) + " --socket " + ferryd.socket() +
            " infer mlp --input " + ferryd.config() + " > " + (dir / "stdout") + " 2>&1";
  status = std::system(command.c_str());
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(ReadFileText(dir / "stdout").find("not a .npy file") != std::string::npos);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

// A bundle whose outputs are not FP32: the index of each row's maximum (INT64), whether the
// row's relu is positive anywhere (BOOL, from a max) and the relu itself (FP16).
void WriteTypedOutputsBundle(const TempDir& dir) {
  WriteFile(dir / "models/typed/manifest.toml", R"(name = "typed"
[[inputs]]
name = "x"
shape = [-1, 4]
[[outputs]]
name = "index"
dtype = "INT64"
shape = [-1]
[[outputs]]
name = "any"
dtype = "BOOL"
shape = [-1]
[[outputs]]
name = "relu"
dtype = "FP16"
shape = [-1, 4]
[batching]
sizes = [1, 4]
[[program]]
op = "arg_max"
input = "x"
output = "index"
axis = 1
[[program]]
op = "relu"
input = "x"
output = "relu"
[[program]]
op = "reduce_max"
input = "relu"
output = "any"
axis = 1
)");
  WriteFile(dir / "models/typed/weights.safetensors", SafetensorsBytes("{}", ""));
}

TEST_CASE("outputs in INT64, BOOL and FP16: converted by the worker, typed in the answer") {
  TempDir dir;
  WriteTypedOutputsBundle(dir);
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  Result<net::HttpAnswer> a = client->Request(
      "POST", "/v2/models/typed/infer",
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2,4],"data":[1,7,7,-2,-1,-3,-0.5,-2]}],)"
      R"("outputs":[{"name":"index"},{"name":"any"},{"name":"relu","parameters":{"binary_data":false}}]})");
  REQUIRE(a.ok());
  INFO(a->body);
  REQUIRE(a->status == 200);
  json body = json::parse(a->body);
  std::map<std::string, json> outputs;
  for (const json& o : body["outputs"]) {
    outputs[o["name"].get<std::string>()] = o;
  }
  CHECK(outputs["index"]["datatype"] == "INT64");
  CHECK(outputs["index"]["data"] == json::array({1, 2}));  // The first of equal maxima.
  CHECK(outputs["any"]["datatype"] == "BOOL");
  CHECK(outputs["any"]["data"] == json::array({true, false}));
  CHECK(outputs["relu"]["datatype"] == "FP16");
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

// A bundle whose clients send text: the example tokenizer plugin turns each sentence into 4
// hashed word ids (vocabulary 10) and a mask; the program sums each row's ids and squared ids
// (a [10, 2] table of (i, i^2)) and counts its words.
void WriteWordsBundle(const TempDir& dir) {
  WriteFile(dir / "models/words/manifest.toml", R"(name = "words"
[[inputs]]
name = "input"
dtype = "INT64"
shape = [-1, 4]
range = [0, 9]
[[inputs]]
name = "mask"
dtype = "INT64"
shape = [-1, 4]
[[outputs]]
name = "sums"
shape = [-1, 2]
[[outputs]]
name = "count"
shape = [-1]
[batching]
sizes = [1, 4]
[hooks]
plugin = "tokenizer.so"
config = "seq=4 vocab=10"
[[hooks.inputs]]
name = "text"
dtype = "BYTES"
shape = [-1]
[[program]]
op = "gather"
input = "input"
output = "rows"
weight = "table"
[[program]]
op = "reduce_sum"
input = "rows"
output = "sums"
axis = 1
[[program]]
op = "reduce_sum"
input = "mask"
output = "count"
axis = 1
)");
  std::vector<float> table;
  for (int i = 0; i < 10; ++i) {
    table.push_back(static_cast<float>(i));
    table.push_back(static_cast<float>(i * i));
  }
  WriteFile(dir / "models/words/weights.safetensors",
            SafetensorsBytes(R"({"table":{"dtype":"F32","shape":[10,2],"data_offsets":[0,80]}})",
                             std::string_view(reinterpret_cast<const char*>(table.data()), 80)));
  std::filesystem::copy_file(std::string(FERRY_EXAMPLE_PLUGIN_DIR) + "/tokenizer.so",
                             dir / "models/words/tokenizer.so");
}

// The tokenizer's id of a word: 1 + FNV-1a(lowercased word) mod (vocab - 1).
int64_t WordId(std::string word, int64_t vocab) {
  uint64_t hash = 14695981039346656037ull;
  for (char ch : word) {
    hash = (hash ^ static_cast<uint8_t>(std::tolower(static_cast<unsigned char>(ch)))) *
           1099511628211ull;
  }
  return 1 + static_cast<int64_t>(hash % static_cast<uint64_t>(vocab - 1));
}

TEST_CASE("text in: BYTES through the tokenizer plugin, in its sandbox, to the model's ids") {
  TempDir dir;
  WriteWordsBundle(dir);
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  auto post = [&](const std::string& target, const std::string& body,
                  const std::string& binary = "") {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!binary.empty()) {
      headers.push_back({"Inference-Header-Content-Length", std::to_string(body.size())});
    }
    Result<net::HttpAnswer> a = client->Request("POST", target, body + binary, headers);
    if (!client->connected()) {
      client = HttpClient::Connect(HttpAddress(ferryd));
    }
    REQUIRE(a.ok());
    return *a;
  };
  net::HttpAnswer a =
      post("/v2/models/words/infer", R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[3],)"
                                     R"("data":["Hello, World","","a b c d e f"]}]})");
  INFO(a.body);
  REQUIRE(a.status == 200);
  json body = json::parse(a.body);
  std::map<std::string, json> out;
  for (const json& o : body["outputs"]) {
    out[o["name"].get<std::string>()] = o;
  }
  CHECK(out["count"]["data"] == json::array({2.0, 0.0, 4.0}));  // Row 3 truncated to 4 words.
  auto sums = [](std::vector<std::string> words) {
    double ids = 0, squares = 0;
    for (const std::string& w : words) {
      int64_t id = WordId(w, 10);
      ids += static_cast<double>(id);
      squares += static_cast<double>(id * id);
    }
    return std::vector<double>{ids, squares};
  };
  std::vector<double> want = sums({"hello", "world"});
  std::vector<double> blank = sums({});
  std::vector<double> letters = sums({"a", "b", "c", "d"});
  want.insert(want.end(), blank.begin(), blank.end());
  want.insert(want.end(), letters.begin(), letters.end());
  CHECK(out["sums"]["data"].get<std::vector<double>>() == want);

  // The same text as KServe's binary BYTES; then one that lies about a length: 400.
  std::string binary = std::string("\5\0\0\0hello", 9);
  std::string header = R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],)"
                       R"("parameters":{"binary_data_size":9}}]})";
  a = post("/v2/models/words/infer", header, binary);
  CHECK(a.status == 200);
  CHECK(json::parse(a.body)["outputs"][1]["data"] == json::array({1.0}));
  a = post("/v2/models/words/infer", header, std::string("\x09\0\0\0hello", 9));
  CHECK(a.status == 400);
  CHECK(a.body.find("claims 9 bytes") != std::string::npos);
  // Text to a model without a plugin that takes it: 400, naming what it expects.
  a = post("/v2/models/mlp/infer",
           R"({"inputs":[{"name":"input","datatype":"BYTES","shape":[1],"data":["x"]}]})");
  CHECK(a.status == 400);
  CHECK(a.body.find("expected FP32 [-1, 784], got BYTES [1]") != std::string::npos);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

// Clients sending until told to stop; every answer checked.

}  // namespace
}  // namespace ferry::testing
