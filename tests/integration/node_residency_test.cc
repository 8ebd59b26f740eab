// More models than the weight budget, on a real node: every model answers correctly while the
// worker loads and evicts weights, the pinned model is never evicted, and /metrics and the
// control status say what moved.
#include <doctest/doctest.h>

#include <regex>

#include "tests/testing/node_samples.h"

namespace ferry::testing {
namespace {

// Four copies of the 2.7 MB MLP (one warm, three on_demand) and the pinned CNN in a 6 MiB
// budget: at most two MLPs fit at once.
constexpr const char* kBudgetNode = "devices = \"cpu:1\"\nhookhosts = 1\n";
constexpr const char* kBudgetSettings =
    "restart_backoff_ms = 20\n[cpu]\nthreads = 1\npin = false\n"
    "[worker]\nweight_budget = \"6MiB\"\n"
    "[scheduler.models.cnn]\nresidency = \"pinned\"\n"
    "[scheduler.models.mlp]\nresidency = \"warm\"\n"
    "[scheduler.models.mlp_b]\nresidency = \"on_demand\"\n"
    "[scheduler.models.mlp_c]\nresidency = \"on_demand\"\n"
    "[scheduler.models.mlp_d]\nresidency = \"on_demand\"\n";

void CopyMlp(const std::string& repo, const std::string& name) {
  std::filesystem::create_directories(repo);
  std::filesystem::copy("examples/models/mlp", repo + "/" + name,
                        std::filesystem::copy_options::recursive);
  std::string manifest = repo + "/" + name + "/manifest.toml";
  std::ifstream in(manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text = std::regex_replace(text, std::regex("name = \"mlp\""), "name = \"" + name + "\"");
  std::ofstream(manifest) << text;
}

// Every sample of `family` whose labels contain `label`, summed (-1: none).
double Metric(const std::string& body, const std::string& family, const std::string& label) {
  double sum = -1;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(family + "{", 0) == 0 && line.find(label) != std::string::npos) {
      sum = std::max(sum, 0.0) + std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return sum;
}

TEST_CASE("a node whose weights pass its budget serves every model correctly") {
  TempDir dir;
  for (const char* name : {"mlp_b", "mlp_c", "mlp_d"}) {
    CopyMlp(dir / "models", name);
  }
  FerrydProcess ferryd(dir, kBudgetNode, kBudgetSettings);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  Direct direct(dir / "models");
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  std::mt19937 rng(29);
  const std::vector<std::string> models = {"mlp", "mlp_b", "cnn", "mlp_c", "mlp_d", "mlp_b"};
  int answered = 0;
  for (int round = 0; round < 8; ++round) {
    for (const std::string& model : models) {
      Sample s = MakeSample(rng);
      while ((s.model == "cnn") != (model == "cnn")) {
        s = MakeSample(rng);
      }
      s.model = model;
      Result<client::InferAnswer> answer = Send(*client, s);
      REQUIRE_MESSAGE(answer.ok(), model << ": " << answer.error().ToString());
      REQUIRE(answer->outputs.size() == 1);
      CHECK_MESSAGE(SameFloats(answer->outputs[0].bytes, direct.Run(model, s.rows, s.input)),
                    model);
      ++answered;
    }
  }
  CHECK(answered == 48);
  std::string body;
  for (int i = 0; i < 100; ++i) {  // The worker publishes its counters every 5 ms.
    body = ScrapeMetrics(ferryd);
    if (Metric(body, "ferry_weight_loads_total", "model=\"mlp_d\"") >= 8) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(Metric(body, "ferry_weight_budget_bytes", "gpu=\"0\"") == 6 * 1024 * 1024);
  CHECK(Metric(body, "ferry_weight_resident_bytes", "gpu=\"0\"") <= 6 * 1024 * 1024);
  CHECK(Metric(body, "ferry_weight_resident_bytes", "gpu=\"0\"") > 2'600'000);
  // Each visit to mlp_c and mlp_d finds it evicted: three MLPs are used between two visits.
  CHECK(Metric(body, "ferry_weight_loads_total", "model=\"mlp_d\"") >= 8);
  CHECK(Metric(body, "ferry_weight_evictions_total", "model=\"mlp_c\"") >= 7);
  CHECK(Metric(body, "ferry_weight_evictions_total", "model=\"cnn\"") == 0);
  CHECK(Metric(body, "ferry_weight_loads_total", "model=\"cnn\"") == 0);
  CHECK(Metric(body, "ferry_model_loaded", "model=\"cnn\"") == 1);
  CHECK(Metric(body, "ferry_weight_load_seconds_total", "model=\"mlp_d\"") > 0);
  CHECK(Metric(body, "ferry_weight_bytes", "model=\"mlp\"") > 2'600'000);
  // Every request placed, counted by what the worker's status said of its weights: the pinned
  // CNN always resident, mlp_d found out at least once (each of its visits follows evictions).
  CHECK(Metric(body, "ferry_gateway_placements_total", "model=\"cnn\",resident=\"true\"") == 8);
  CHECK(Metric(body, "ferry_gateway_placements_total", "model=\"cnn\",resident=\"false\"") == 0);
  CHECK(Metric(body, "ferry_gateway_placements_total", "model=\"mlp_d\",resident=\"false\"") >= 1);
  CHECK(Metric(body, "ferry_gateway_placements_total", "model=\"mlp_d\",resident=\"true\"") +
            Metric(body, "ferry_gateway_placements_total", "model=\"mlp_d\",resident=\"false\"") ==
        8);

  Result<json> control = ferryd.Call(control::Command::kControlStatus);
  REQUIRE(control.ok());
  bool found = false;
  for (const json& w : (*control)["workers"]) {
    CHECK(w["weight_budget_bytes"] == 6 * 1024 * 1024);
    for (const json& m : w["models"]) {
      if (m["model"] == "mlp_d") {
        found = true;
        CHECK(m["weight_loads"].get<int>() >= 8);
        CHECK(m.contains("last_weight_load_seconds_ago"));
      }
    }
  }
  CHECK(found);
}

TEST_CASE("a model larger than the budget is refused at start, naming the sizes") {
  TempDir dir;
  FerrydProcess ferryd(dir, kBudgetNode,
                       "restart_backoff_ms = 20\n[cpu]\nthreads = 1\npin = false\n"
                       "[worker]\nweight_budget = \"2MiB\"\n");
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  Result<HttpClient> client = HttpClient::Connect(HttpAddress(ferryd));
  REQUIRE(client.ok());
  std::mt19937 rng(3);
  Sample s = MakeSample(rng);
  while (s.model != "mlp") {
    s = MakeSample(rng);
  }
  // Right after ready, a hook host may not have read the worker's status yet and answer "no
  // worker is ready" or "loaded on no ready worker" (a client retries those); any other
  // answer is final.
  auto send = [&](const Sample& sample) {
    auto transient = [](const Result<client::InferAnswer>& a) {
      return !a.ok() && a.error().code == ErrorCode::kUnavailable &&
             (a.error().message.find("no worker is ready") != std::string::npos ||
              a.error().message.find("loaded on no ready worker") != std::string::npos);
    };
    Result<client::InferAnswer> a = Send(*client, sample);
    for (int i = 0; i < 250 && transient(a); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      a = Send(*client, sample);
    }
    return a;
  };
  Result<client::InferAnswer> answer = send(s);
  REQUIRE_FALSE(answer.ok());
  INFO(answer.error().ToString());
  INFO(ferryd.log());
  CHECK(answer.error().message.find("2097152 bytes") != std::string::npos);
  CHECK(answer.error().message.find("weight_budget") != std::string::npos);
  while (s.model != "cnn") {
    s = MakeSample(rng);
  }
  Result<client::InferAnswer> cnn = send(s);
  CHECK_MESSAGE(cnn.ok(), (cnn.ok() ? "" : cnn.error().ToString()));  // The CNN fits and serves.
}

}  // namespace
}  // namespace ferry::testing
