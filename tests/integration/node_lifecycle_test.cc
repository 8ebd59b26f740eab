// The node while it changes and dies: models loaded and unloaded on a running node, a worker
// or a hook host SIGKILLed under load, and a stop (SIGTERM) under load.
#include <doctest/doctest.h>
#include <signal.h>

#include "tests/testing/node_samples.h"

namespace ferry::testing {
namespace {

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
    // The repository extension lists it; its load and unload are off without model_control.
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
    CHECK(refused->body.find("[frontend] model_control") != std::string::npos);
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

TEST_CASE("an unload with a drain notice answers not ready first and serves meanwhile") {
  TempDir dir;
  FerrydProcess ferryd(dir, kCpuNode, std::string("drain_notice_seconds = 1.5\n") + kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  control::ControlRequest request;
  request.command = control::Command::kUnload;
  request.model = "mlp";
  auto ready_status = [&] {
    Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
    REQUIRE(client.ok());
    return client->Request("GET", "/v2/models/mlp/ready").value().status;
  };
  CHECK(ready_status() == 200);
  Result<json> unload = ferryd.Call(request);
  REQUIRE_MESSAGE(unload.ok(), unload.error().message);
  CHECK((*unload)["notice_seconds"] == 1.5);
  CHECK_FALSE(ferryd.Call(request).ok());  // Being unloaded already.
  // During the notice: not ready, yet served (a balancer's in-flight requests do not fail).
  CHECK(ready_status() == 400);
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  std::mt19937 rng(7);
  Sample sample = MakeSample(rng);
  while (sample.model != "mlp") {
    sample = MakeSample(rng);
  }
  Result<client::InferAnswer> served = Send(*client, sample);
  CHECK_MESSAGE(served.ok(), served.error().message);
  CHECK((*ferryd.Status())["model_table"] == json::array({"cnn", "mlp"}));
  // After it: unloaded.
  std::optional<json> gone = ferryd.StatusWhen([](const json& s) {
    return s["model_table"] == json::array({"cnn", "-"});
  });
  REQUIRE_MESSAGE(gone.has_value(), ferryd.log());
  CHECK(ready_status() != 200);  // 400 until the hook hosts restart with the new table, then 404.
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

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

// The MLP behind the escape test plugin doing `action` in every preprocess, as model `name`.
void WriteEscapeBundle(const TempDir& dir, const std::string& name, const std::string& action) {
  std::string bundle = dir / ("models/" + name);
  std::filesystem::create_directories(bundle);
  std::ifstream in("examples/models/mlp/manifest.toml");
  std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  manifest.replace(manifest.find("name = \"mlp\""), 12, "name = \"" + name + "\"");
  WriteFile(bundle + "/manifest.toml",
            manifest + "\n[hooks]\nplugin = \"escape.so\"\nconfig = \"" + action + "\"\n");
  std::filesystem::copy_file("examples/models/mlp/weights.safetensors",
                             bundle + "/weights.safetensors");
  std::filesystem::copy_file(std::string(FERRY_TEST_PLUGIN_DIR) + "/escape.so",
                             bundle + "/escape.so");
}

TEST_CASE(
    "a plugin's output reaches ferryd's log only as its hook host's; it holds no fd to pass") {
  TempDir dir;
  WriteEscapeBundle(dir, "forge", "forge_log");
  WriteEscapeBundle(dir, "fds", "inheritable_fds");
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  std::mt19937 rng(1);
  Sample sample = MakeSample(rng);
  while (sample.model != "mlp") sample = MakeSample(rng);
  sample.model = "forge";
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  Result<client::InferAnswer> r = Send(*client, sample);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("forge_log (written, relayed)") != std::string::npos);
  // And every descriptor it can see past 0-2 (listening sockets included) is close-on-exec.
  sample.model = "fds";
  Result<client::InferAnswer> fds = Send(*client, sample);
  REQUIRE_FALSE(fds.ok());
  CHECK_MESSAGE(fds.error().message.find("refused: inheritable_fds") != std::string::npos,
                fds.error().message);
  std::string log;
  for (int i = 0; i < 100 && log.find("forged by a plugin") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log = ferryd.log();
  }
  // Both lines arrived, each behind its hook host's name; no line of the log starts with one.
  CHECK(log.find("| 2026-01-01 00:00:00.000 error ferryd[1] forged by a plugin\n") !=
        std::string::npos);
  CHECK(log.find("\n2026-01-01 00:00:00.000 error ferryd[1]") == std::string::npos);
  CHECK(log.rfind("2026-01-01", 0) != 0);
  // The hook hosts' own lines are relayed the same way.
  CHECK(log.find("hook host 0 (slot 0)| ") != std::string::npos);
}

TEST_CASE("with hostile plugins loaded, a stopped node starts again on the same ports") {
  TempDir dir;
  for (const char* action : {"fork", "execve", "connect"}) {
    WriteEscapeBundle(dir, std::string("at_create_") + action, std::string("create:") + action);
  }
  FerrydProcess ferryd(dir, kCpuNode, kSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  json status = *ferryd.Status();
  std::string http = status["listen"]["http"].get<std::string>();
  std::string grpc = status["listen"]["grpc"].get<std::string>();
  kill(ferryd.pid(), SIGTERM);
  REQUIRE(ferryd.Wait() == 0);
  // The same node file with the ports it had: nothing of the first node (no daemon a plugin
  // forked) may still hold them.
  std::ifstream in(ferryd.config());
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  config.replace(config.find("http = \"127.0.0.1:0\""), 20, "http = \"" + http + "\"");
  config.replace(config.find("grpc = \"127.0.0.1:0\""), 20, "grpc = \"" + grpc + "\"");
  WriteFile(ferryd.config(), config);
  ferryd.Start();
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  CHECK(ferryd.Status()->at("listen")["http"] == http);
  Result<HttpClient> client = HttpClient::Connect(http);
  REQUIRE(client.ok());
  std::mt19937 rng(4);
  Sample sample = MakeSample(rng);
  CHECK(Send(*client, sample).ok());
}

TEST_CASE("a plugin call past its limit restarts its hook host; repeated, its model is failed") {
  TempDir dir;
  WriteEscapeBundle(dir, "spin", "spin");
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
