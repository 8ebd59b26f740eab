// The node as clients see it: ferryd started on CPU workers, requests over HTTP (the KServe v2
// front end in the hook hosts), outputs compared with CpuBackend run directly; a worker or a
// hook host killed under load, and a stop under load.
#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "client/kserve_client.h"
#include "ctl/npy.h"
#include "model/repository.h"
#include "net/http_client.h"
#include "shm/segment.h"
#include "tests/testing/ferryd_process.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"

namespace ferry::testing {
namespace {

using client::Tensor;
using net::HttpClient;
using nlohmann::json;

constexpr const char* kCpuNode = "devices = \"cpu:2\"\nhookhosts = 2\n";
constexpr const char* kSettings =
    "restart_backoff_ms = 20\nrestart_backoff_max_ms = 200\ndrain_timeout_seconds = 20\n"
    "[cpu]\nthreads = 1\npin = false\n";

// CpuBackend run directly, one request at a time at the smallest compiled size holding it.
struct Direct {
  std::vector<RepositoryModel> repo;
  CpuBackend backend{CpuOptions{CpuMode::kFast, 1}};
  std::map<std::string, std::pair<const Manifest*, ModelHandle>> models;
  std::mutex mu;
  explicit Direct(const std::string& dir) : repo(LoadRepository(dir).value()) {
    for (const RepositoryModel& m : repo) {
      if (m.bundle) {
        models[m.name] = {&m.bundle->manifest, backend.Load(*m.bundle).value()};
      }
    }
  }
  std::vector<uint8_t> Run(const std::string& model, int64_t rows, const std::vector<uint8_t>& in) {
    std::lock_guard<std::mutex> lock(mu);
    auto& [manifest, handle] = models.at(model);
    int64_t size =
        *std::lower_bound(manifest->batch_sizes.begin(), manifest->batch_sizes.end(), rows);
    std::vector<uint8_t> out(static_cast<size_t>(rows) * 10 * 4);
    BatchJob job{0, size, {{rows, {in}, {out}}}};
    REQUIRE(backend.Execute(handle, job).ok());
    return out;
  }
};

bool SameFloats(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return false;
  }
  for (size_t i = 0; i + 4 <= want.size(); i += 4) {
    float a, b;
    std::memcpy(&a, got.data() + i, 4);
    std::memcpy(&b, want.data() + i, 4);
    if (std::fabs(a - b) > 1e-4f * std::max(1.0f, std::fabs(b))) {
      return false;
    }
  }
  return true;
}

struct Sample {
  std::string model;
  int64_t rows;
  std::vector<uint8_t> input;
  Shape shape;
  std::string input_name;
};

Sample MakeSample(std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1, 1);
  Sample s;
  bool mlp = rng() % 2 == 0;
  s.model = mlp ? "mlp" : "cnn";
  s.rows = mlp ? 1 + rng() % 4 : 1 + rng() % 2;
  s.input_name = mlp ? "input" : "image";
  s.shape = mlp ? Shape{s.rows, 784} : Shape{s.rows, 3, 32, 32};
  size_t count = static_cast<size_t>(s.rows) * (mlp ? 784 : 3 * 32 * 32);
  s.input.resize(count * 4);
  for (size_t i = 0; i < count; ++i) {
    float f = value(rng);
    std::memcpy(s.input.data() + 4 * i, &f, 4);
  }
  return s;
}

Result<client::InferAnswer> Send(HttpClient& client, const Sample& s) {
  client::InferBody body =
      client::BuildInferBody({Tensor{s.input_name, DType::kF32, s.shape, s.input}});
  Result<net::HttpAnswer> answer =
      client.Request("POST", "/v2/models/" + s.model + "/infer", body.body, body.headers);
  if (!answer.ok()) {
    return answer.error();
  }
  return client::ReadInferAnswer(*answer);
}

std::string HttpAddress(const FerrydProcess& ferryd) {
  Result<json> s = ferryd.Status();
  REQUIRE(s.ok());
  return (*s)["listen"]["http"].get<std::string>();
}

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
bool Settled(const json& status, const std::string& model, const std::string& state) {
  if (status["state"] != "ready" || status["models_changing"].get<bool>()) {
    return false;
  }
  for (const json& c : status["children"]) {
    if (c["kind"] != "worker") continue;
    bool found = false;
    for (const json& m : c["models"]) {
      if (m["model"] == model) found = m["state"] == state;
    }
    if (found != !state.empty()) return false;
  }
  return true;
}

// The value of the /metrics sample `sample` (its name and labels as rendered), once the
// workers' snapshots (published every 5 ms) show `want`; what it last was otherwise (-1: absent).
double MetricWhen(FerrydProcess& ferryd, const std::string& sample, double want) {
  double value = -1;
  for (int i = 0; i < 300 && value != want; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    Result<json> status = ferryd.Status();
    if (!status.ok()) continue;
    Result<HttpClient> client =
        HttpClient::Connect((*status)["listen"]["metrics"].get<std::string>());
    if (!client.ok()) continue;
    Result<net::HttpAnswer> metrics = client->Request("GET", "/metrics");
    if (!metrics.ok()) continue;
    size_t at = metrics->body.find("\n" + sample + " ");
    value = at == std::string::npos ? -1 : std::stod(metrics->body.substr(at + sample.size() + 2));
  }
  return value;
}

std::vector<int> Pids(const json& status, const std::string& kind) {
  std::vector<int> pids;
  for (const json& c : status["children"]) {
    if (c["kind"] == kind) pids.push_back(c["pid"].get<int>());
  }
  return pids;
}

TEST_CASE("load and unload on a running node: workers keep running, clients see the change") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  json before = *ferryd.Status();
  CHECK(before["model_table"] == json::array({"cnn", "mlp"}));
  // A new bundle appears in the repository: the MLP under another name.
  std::string repo = dir / "models";
  std::filesystem::create_directories(repo + "/mlp2");
  std::ifstream in("examples/models/mlp/manifest.toml");
  std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  manifest.replace(manifest.find("name = \"mlp\""), 12, "name = \"mlp2\"");
  WriteFile(repo + "/mlp2/manifest.toml", manifest);
  std::filesystem::copy_file("examples/models/mlp/weights.safetensors",
                             repo + "/mlp2/weights.safetensors");
  WriteFile(repo + "/broken/manifest.toml", "name = \"broken\"\n");
  auto change = [&](control::Command command, const std::string& model) {
    control::ControlRequest request;
    request.command = command;
    request.model = model;
    return ferryd.Call(request);
  };
  Direct direct(repo);
  std::mt19937 rng(5);
  Sample sample = MakeSample(rng);
  while (sample.model != "mlp") sample = MakeSample(rng);
  std::vector<uint8_t> want = direct.Run("mlp", sample.rows, sample.input);
  sample.model = "mlp2";
  {
    Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
    REQUIRE(client.ok());
    Result<client::InferAnswer> unknown = Send(*client, sample);
    REQUIRE_FALSE(unknown.ok());
    CHECK(unknown.error().code == ErrorCode::kNotFound);
  }

  // Load events: each worker loaded the two models at start.
  for (const char* gpu : {"0", "1"}) {
    std::string g = std::string("{gpu=\"") + gpu + "\"}";
    CHECK(MetricWhen(ferryd, "ferry_model_loads_total" + g, 2) == 2);
    CHECK(MetricWhen(ferryd, "ferry_model_unloads_total" + g, 0) == 0);
    CHECK(MetricWhen(ferryd, "ferry_model_load_failures_total" + g, 0) == 0);
  }

  Result<json> loaded = change(control::Command::kLoad, "mlp2");
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  CHECK((*loaded)["index"] == 2);
  std::optional<json> after =
      ferryd.StatusWhen([](const json& s) { return Settled(s, "mlp2", "ready"); });
  REQUIRE_MESSAGE(after.has_value(), ferryd.log());
  CHECK(MetricWhen(ferryd, "ferry_model_loads_total{gpu=\"0\"}", 3) == 3);
  CHECK(MetricWhen(ferryd, "ferry_model_load_seconds{gpu=\"0\",model=\"mlp2\"}", 0) > 0);
  CHECK((*after)["model_table"] == json::array({"cnn", "mlp", "mlp2"}));
  CHECK(Pids(*after, "worker") == Pids(before, "worker"));  // Not restarted.
  for (int pid : Pids(*after, "hookhost")) {                // Restarted, one at a time.
    for (int old : Pids(before, "hookhost")) CHECK(pid != old);
  }
  CHECK(ChildOf(*after, "worker", 0)["restarts"] == 0);
  {
    Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
    REQUIRE(client.ok());
    // The repository extension lists it; its load and unload are refused on this port.
    Result<net::HttpAnswer> index = client->Request("POST", "/v2/repository/index", "");
    REQUIRE(index.ok());
    CHECK(index->status == 200);
    json listed = json::parse(index->body);
    CHECK(listed.size() == 3);
    CHECK(listed[2] == json{{"name", "mlp2"}, {"state", "READY"}, {"version", "1"}});
    Result<net::HttpAnswer> refused =
        client->Request("POST", "/v2/repository/models/mlp2/unload", "{}");
    REQUIRE(refused.ok());
    CHECK_MESSAGE(refused->status == 403, refused->body);
    CHECK(refused->body.find("ferryctl load / unload") != std::string::npos);
    index =
        client->Request("POST", "/v2/repository/index", std::string(100, '[') + "{\"ready\":1}");
    REQUIRE(index.ok());
    CHECK(index->status == 200);  // A hostile body is no filter, and no crash.
    Result<client::InferAnswer> answer = Send(*client, sample);
    REQUIRE_MESSAGE(answer.ok(), answer.error().message);
    CHECK(SameFloats(answer->outputs.at(0).bytes, want));
  }

  // Refusals, each naming what is wrong; nothing changes.
  Result<json> again = change(control::Command::kLoad, "mlp2");
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message.find("'mlp2' is already loaded (index 2)") != std::string::npos);
  Result<json> broken = change(control::Command::kLoad, "broken");
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message.find("load 'broken'") != std::string::npos);
  Result<json> absent = change(control::Command::kLoad, "nosuch");
  REQUIRE_FALSE(absent.ok());
  CHECK(absent.error().code == ErrorCode::kNotFound);
  Result<json> not_loaded = change(control::Command::kUnload, "nosuch");
  REQUIRE_FALSE(not_loaded.ok());
  CHECK(not_loaded.error().message == "no model 'nosuch' is loaded");

  // A worker restarted now starts with the table as it is, and serves mlp2 at index 2.
  kill(ChildOf(*after, "worker", 1)["pid"].get<int>(), SIGKILL);
  std::optional<json> restarted = ferryd.StatusWhen([](const json& s) {
    return Settled(s, "mlp2", "ready") && ChildOf(s, "worker", 1)["restarts"] == 1;
  });
  REQUIRE_MESSAGE(restarted.has_value(), ferryd.log());

  Result<json> unloaded = change(control::Command::kUnload, "mlp2");
  REQUIRE_MESSAGE(unloaded.ok(), unloaded.error().message);
  std::optional<json> gone =
      ferryd.StatusWhen([](const json& s) { return Settled(s, "mlp2", ""); });
  REQUIRE_MESSAGE(gone.has_value(), ferryd.log());
  CHECK((*gone)["model_table"] == json::array({"cnn", "mlp", "-"}));
  CHECK(ChildOf(*gone, "worker", 0)["models"][2]["state"] == "unloaded");
  // Its weights freed on both workers (worker 1 loaded it at its restart).
  for (const char* gpu : {"0", "1"}) {
    std::string g = std::string("{gpu=\"") + gpu + "\"}";
    CHECK(MetricWhen(ferryd, "ferry_model_unloads_total" + g, 1) == 1);
    CHECK(MetricWhen(ferryd, "ferry_model_loads_total" + g, 3) == 3);
  }
  {
    Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
    REQUIRE(client.ok());
    Result<client::InferAnswer> answer = Send(*client, sample);
    REQUIRE_FALSE(answer.ok());
    CHECK(answer.error().code == ErrorCode::kNotFound);
    sample.model = "mlp";
    answer = Send(*client, sample);  // The others serve on.
    CHECK_MESSAGE(answer.ok(), answer.error().message);
    sample.model = "mlp2";
  }
  // Loaded again: a new index, serving.
  Result<json> reloaded = change(control::Command::kLoad, "mlp2");
  REQUIRE_MESSAGE(reloaded.ok(), reloaded.error().message);
  CHECK((*reloaded)["index"] == 3);
  REQUIRE(ferryd.StatusWhen([](const json& s) { return Settled(s, "mlp2", "ready"); }));
  for (const char* gpu : {"0", "1"}) {
    std::string g = std::string("{gpu=\"") + gpu + "\"}";
    CHECK(MetricWhen(ferryd, "ferry_model_loads_total" + g, 4) == 4);
  }
  {
    Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
    REQUIRE(client.ok());
    Result<client::InferAnswer> answer = Send(*client, sample);
    REQUIRE_MESSAGE(answer.ok(), answer.error().message);
    CHECK(SameFloats(answer->outputs.at(0).bytes, want));
  }
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

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

// Clients sending until told to stop; every answer checked.
struct Load {
  std::atomic<bool> stop{false};
  std::atomic<int> exact{0}, wrong{0}, unavailable{0}, other_error{0}, lost{0}, refused{0};
  std::mutex mu;
  std::vector<std::string> odd;
  std::vector<std::thread> threads;

  void Start(const std::string& address, Direct* direct, int n) {
    for (int t = 0; t < n; ++t) {
      threads.emplace_back([this, address, direct, t] {
        std::mt19937 rng(static_cast<unsigned>(100 + t));
        std::optional<HttpClient> client;
        bool answered_on_this = false;
        while (!stop.load()) {
          if (!client || !client->connected()) {
            Result<HttpClient> c = HttpClient::Connect(address, 2000);
            if (!c.ok()) {
              ++refused;
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
              continue;
            }
            client.emplace(std::move(*c));
            answered_on_this = false;
          }
          Sample s = MakeSample(rng);
          Result<client::InferAnswer> r = Send(*client, s);
          if (r.ok()) {
            answered_on_this = true;
            bool same = SameFloats(r->outputs.at(0).bytes, direct->Run(s.model, s.rows, s.input));
            ++(same ? exact : wrong);
          } else if (r.error().code == ErrorCode::kUnavailable &&
                     r.error().message.find("connection to") != std::string::npos) {
            // No HTTP answer: lost if this connection had been served (the server had
            // accepted it); a fresh one may meet a hook host that just died or stopped.
            ++(answered_on_this ? lost : refused);
            std::lock_guard<std::mutex> lock(mu);
            odd.push_back(r.error().ToString());
          } else if (r.error().code == ErrorCode::kUnavailable) {
            ++unavailable;
            answered_on_this = true;
          } else {
            ++other_error;
            std::lock_guard<std::mutex> lock(mu);
            odd.push_back(r.error().ToString());
          }
        }
      });
    }
  }
  void Join() {
    stop.store(true);
    for (std::thread& t : threads) {
      t.join();
    }
  }
  std::string Report() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out = "exact " + std::to_string(exact) + " wrong " + std::to_string(wrong) +
                      " unavailable " + std::to_string(unavailable) + " other " +
                      std::to_string(other_error) + " lost " + std::to_string(lost) + " refused " +
                      std::to_string(refused);
    for (size_t i = 0; i < odd.size() && i < 5; ++i) {
      out += "\n  " + odd[i];
    }
    return out;
  }
};

uint64_t BytesInUse(const std::string& segment) {
  Result<shm::Segment> view = shm::Segment::Attach(segment, shm::kSupervisor);
  REQUIRE(view.ok());
  uint64_t total = 0;
  for (uint32_t s = 0; s < view->num_slots(); ++s) {
    total += view->accounting(s).bytes_in_use.load();
  }
  return total;
}

TEST_CASE("SIGKILL under load: only in-flight requests fail, UNAVAILABLE; nothing leaks") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  std::string address = HttpAddress(ferryd);
  std::string segment = shm::Segment::NameForNode(ferryd.name());
  Direct direct(dir / "models");
  bool worker = true;
  SUBCASE("a worker") { worker = true; }
  SUBCASE("a hook host") { worker = false; }
  Load load;
  load.Start(address, &direct, 8);
  for (int i = 0; i < 3000 && load.exact.load() < 20; ++i) {  // Serving (polled, not slept).
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int64_t pid = ChildOf(*ready, worker ? "worker" : "hookhost", 0)["pid"].get<int64_t>();
  kill(static_cast<pid_t>(pid), SIGKILL);
  std::optional<json> back = ferryd.StatusWhen([&](const json& s) {
    json c = ChildOf(s, worker ? "worker" : "hookhost", 0);
    return s["state"] == "ready" && c["restarts"].get<int64_t>() == 1;
  });
  REQUIRE_MESSAGE(back, ferryd.log());
  int before = load.exact.load();
  // Served after the restart (polled: a sanitizer build on a loaded machine may take a while).
  for (int i = 0; i < 3000 && load.exact.load() <= before + 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  load.Join();
  MESSAGE(load.Report());
  CHECK(load.wrong.load() == 0);
  CHECK(load.other_error.load() == 0);
  CHECK(load.exact.load() > before);
  if (worker) {
    CHECK(load.lost.load() == 0);  // Hook hosts answered every request, UNAVAILABLE or not.
  }
  // Every request in flight is answered and every block handed back.
  bool clean = false;
  for (int i = 0; i < 2000 && !clean; ++i) {
    clean = BytesInUse(segment) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(clean);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
  CHECK_FALSE(ShmExists(segment));
}

TEST_CASE("SIGTERM under load: every request sent on a served connection is answered") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  std::string address = HttpAddress(ferryd);
  Direct direct(dir / "models");
  Load load;
  load.Start(address, &direct, 8);
  for (int i = 0; i < 3000 && load.exact.load() < 20; ++i) {  // Serving (polled, not slept).
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(ferryd.pid(), SIGTERM);
  int code = ferryd.Wait();
  load.Join();
  MESSAGE(load.Report());
  CHECK(code == 0);
  CHECK(load.lost.load() == 0);
  CHECK(load.wrong.load() == 0);
  CHECK(load.other_error.load() == 0);
  CHECK(load.exact.load() > 0);
}

}  // namespace
}  // namespace ferry::testing
