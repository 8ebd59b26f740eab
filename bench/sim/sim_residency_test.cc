#include "bench/sim/sim_residency.h"

#include <doctest/doctest.h>

#include "bench/sim/simulator.h"

namespace ferry::sim {
namespace {

Scenario Parse(const std::string& text) {
  Result<Scenario> s = ParseScenario(text, "scenario.toml", ".");
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

// Six models of 100 MB each under a 400 MiB budget (four fit), loads at 1 GB/s (0.1 s each):
// "hot" pinned and busy, three warm ones with light traffic, two on_demand ones with a
// request now and then. Alternatives: every model resident, and evict-all-on-miss.
std::string Scenario6(const std::string& extra = "") {
  std::string text = R"(
name = "weights"
duration_seconds = 40
warmup_seconds = 5
baselines = false
weight_budget = "400MiB"
load_gb_per_s = 1.0
)" + extra;
  auto model = [&](const std::string& name, const std::string& residency, double rate) {
    text += "[[models]]\nname = \"" + name + "\"\nsizes = [1, 4]\nweight_bytes = 100000000\n" +
            "residency = \"" + residency + "\"\ncost = { fixed_seconds = 0.002, " +
            "per_row_seconds = 0.0005 }\n[[models.arrivals]]\nkind = \"poisson\"\nrate = " +
            std::to_string(rate) + "\n";
  };
  model("hot", "pinned", 150);
  model("w1", "warm", 20);
  model("w2", "warm", 20);
  model("w3", "warm", 20);
  model("cold1", "on_demand", 2);
  model("cold2", "on_demand", 2);
  text += R"(
[[alternatives]]
label = "all resident"
weight_budget = "1GiB"
[[alternatives]]
label = "naive"
eviction = "all"
)";
  return text;
}

const ModelReport& Model(const RunReport& run, const std::string& name) {
  for (const ModelReport& m : run.models) {
    if (m.name == name) return m;
  }
  FAIL("no model " << name);
  return run.models.front();
}

TEST_CASE("under a weight budget every request is served; loads and evictions are counted") {
  Result<ScenarioReport> report = RunScenario(Parse(Scenario6()), nullptr);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  const RunReport& lru = report->ferry;
  uint64_t loads = 0, evictions = 0;
  for (const ModelReport& m : lru.models) {
    CAPTURE(m.name);
    CHECK(m.dropped == 0);
    CHECK(m.requests_completed > 0);
    loads += m.weight_loads;
    evictions += m.weight_evictions;
    // A load takes 0.1 s of virtual time.
    CHECK(m.weight_load_seconds == doctest::Approx(0.1 * static_cast<double>(m.weight_loads)));
  }
  CHECK(loads > 0);
  CHECK(evictions > 0);
  CHECK(Model(lru, "hot").weight_evictions == 0);  // Pinned.
  CHECK(Model(lru, "hot").weight_loads == 0);
  // The everything-resident run loads nothing; the naive one loads far more.
  REQUIRE(report->alternatives.size() == 2);
  const RunReport& resident = report->alternatives[0];
  const RunReport& naive = report->alternatives[1];
  uint64_t naive_loads = 0;
  for (const ModelReport& m : resident.models) {
    CHECK(m.weight_loads <= 1);  // on_demand models load at their first use, once.
    CHECK(m.weight_evictions == 0);
  }
  for (const ModelReport& m : naive.models) {
    naive_loads += m.weight_loads;
  }
  CHECK(2 * naive_loads > 3 * loads);  // Deterministic (virtual time): 378 against 228.
  // The pinned hot model barely notices the budget; under the naive policy the warm ones
  // wait for loads far more often.
  CHECK(Model(lru, "hot").queue_wait_p99_s < 2 * Model(resident, "hot").queue_wait_p99_s + 0.005);
  CHECK(Model(naive, "w1").queue_wait_p99_s > Model(lru, "w1").queue_wait_p99_s);
}

TEST_CASE("a model's loads are charged to its share: evicted models cannot take the GPU") {
  // Two equal-weight saturating models that do not fit together: each load (0.1 s) is charged
  // to its model, so GPU seconds stay about even, and neither is starved.
  Scenario s = Parse(R"(
name = "thrash"
duration_seconds = 30
warmup_seconds = 2
baselines = false
weight_budget = 100
load_gb_per_s = 0.000001
[[models]]
name = "a"
weight_bytes = 100
residency = "on_demand"
cost = { fixed_seconds = 0.01, per_row_seconds = 0 }
[[models.arrivals]]
kind = "saturate"
[[models]]
name = "b"
weight_bytes = 100
residency = "on_demand"
cost = { fixed_seconds = 0.01, per_row_seconds = 0 }
[[models.arrivals]]
kind = "saturate"
)");
  Result<ScenarioReport> report = RunScenario(s, nullptr);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  const RunReport& run = report->ferry;
  CHECK(Model(run, "a").weight_loads > 10);
  CHECK(Model(run, "b").weight_loads > 10);
  CHECK(Model(run, "a").gpu_seconds == doctest::Approx(Model(run, "b").gpu_seconds).epsilon(0.2));
}

TEST_CASE("budget mistakes are scenario errors") {
  auto error = [](const std::string& text) {
    Result<Scenario> s = ParseScenario(text, "s.toml", ".");
    return s.ok() ? std::string() : s.error().message;
  };
  std::string model = "[[models]]\nname = \"a\"\n";
  CHECK(error("weight_budget = 100\n" + model).find("weight_bytes") != std::string::npos);
  CHECK(
      error("weight_budget = 100\n" + model + "weight_bytes = 200\n").find("(0, weight_budget]") !=
      std::string::npos);
  CHECK(error("weight_budget = 150\n[[models]]\nname = \"a\"\nweight_bytes = 100\nresidency = "
              "\"pinned\"\n[[models]]\nname = \"b\"\nweight_bytes = 100\nresidency = \"pinned\"\n")
            .find("pinned") != std::string::npos);
  CHECK(error("weight_budget = \"lots\"\n" + model).find("bytes") != std::string::npos);
  CHECK(error("eviction = \"fifo\"\n" + model).find("lru") != std::string::npos);
  CHECK(error(model + "residency = \"hot\"\n").find("residency") != std::string::npos);
}

}  // namespace
}  // namespace ferry::sim
