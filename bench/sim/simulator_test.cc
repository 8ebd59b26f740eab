#include "bench/sim/simulator.h"

#include <doctest/doctest.h>

#include "bench/sim/report.h"

namespace ferry::sim {
namespace {

Scenario Parse(const std::string& text) {
  Result<Scenario> s = ParseScenario(text, "scenario.toml", ".");
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

const char* kBurst = R"(
name = "burst"
duration_seconds = 5
warmup_seconds = 0
[[models]]
name = "m"
sizes = [1, 8, 32]
cost = { fixed_seconds = 0.001, per_row_seconds = 0.0001 }
[[models.arrivals]]
kind = "burst"
count = 1000
)";

TEST_CASE("a scenario parses models, costs, arrivals and scheduler keys") {
  Scenario s = Parse(R"(
name = "x"
duration_seconds = 10
warmup_seconds = 1
seed = 7
[scheduler]
discipline = "edf"
[[models]]
name = "a"
weight = 2
sizes = [1, 4]
max_batch_size = 4
cost = { fixed_seconds = 0.001, per_row_seconds = 0.0002, noise = 0.1, table = { "4" = 0.002 } }
[[models.arrivals]]
kind = "poisson"
rate = 100
rows = [1, 3]
deadline_seconds = 0.05
[[alternatives]]
label = "fifo"
discipline = "fifo"
)");
  CHECK(s.seed == 7);
  CHECK(s.scheduler.discipline == Discipline::kEdf);
  REQUIRE(s.models.size() == 1);
  CHECK(s.models[0].cost.Mean(1) == doctest::Approx(0.0012));
  CHECK(s.models[0].cost.Mean(4) == doctest::Approx(0.002));
  CHECK(s.models[0].arrivals[0].rows_max == 3);
  CHECK(s.scheduler.ForModel("a").weight == 2);
  CHECK(s.alternatives[0].scheduler.discipline == Discipline::kFifo);
}

TEST_CASE("scenario errors are all reported with positions") {
  Result<Scenario> s = ParseScenario(R"(
duration_seconds = -1
[[models]]
name = "a"
sizes = [8, 1]
[[models.arrivals]]
kind = "poisson"
[[models.arrivals]]
kind = "lottery"
)",
                                     "bad.toml", ".");
  REQUIRE_FALSE(s.ok());
  const std::string& m = s.error().message;
  CHECK(m.find("bad.toml:2:20: duration_seconds: must be in (0, 1e+06]") != std::string::npos);
  CHECK(m.find("models[0].sizes: compiled sizes must be strictly ascending") != std::string::npos);
  CHECK(m.find("rate: poisson arrivals need rate") != std::string::npos);
  CHECK(m.find("unknown arrival kind 'lottery'") != std::string::npos);
}

TEST_CASE("tenants: weights reach the scheduler, streams name them, mistakes are errors") {
  Scenario s = Parse(R"(
[[tenants]]
name = "gold"
weight = 3
[[tenants]]
name = "bronze"
[[models]]
name = "m"
[[models.arrivals]]
kind = "saturate"
tenant = "bronze"
priority = 1
)");
  REQUIRE(s.tenants.size() == 2);
  CHECK(s.scheduler.tenant_weights == std::map<uint32_t, double>{{1, 3.0}, {2, 1.0}});
  CHECK(s.models[0].arrivals[0].tenant == 2);
  CHECK(s.models[0].arrivals[0].priority == 1);
  Result<Scenario> bad = ParseScenario(R"(
[[tenants]]
name = "gold"
weight = 0
[[models]]
name = "m"
[[models.arrivals]]
kind = "saturate"
tenant = "silver"
priority = 4
)",
                                       "bad.toml", ".");
  REQUIRE_FALSE(bad.ok());
  const std::string& m = bad.error().message;
  CHECK(m.find("weight") != std::string::npos);
  CHECK(m.find("no [[tenants]] entry is named 'silver'") != std::string::npos);
  CHECK(m.find("priority") != std::string::npos);
}

TEST_CASE("traces are parsed strictly, naming the bad line") {
  Result<std::vector<TraceEvent>> good = ParseTrace("time,rows\n0.5,2\n1.0,1,0.05\n", "t.csv");
  REQUIRE(good.ok());
  CHECK(good->size() == 2);
  CHECK((*good)[1].deadline_seconds == 0.05);
  CHECK(ParseTrace("0.5,x\n", "t.csv").error().message == "t.csv:1: 'x' is not a number");
  CHECK(ParseTrace("1,1\n0.5,1\n", "t.csv").error().message == "t.csv:2: times must not decrease");
  CHECK_FALSE(ParseTrace("0.5,1.5\n", "t.csv").ok());
}

TEST_CASE("a burst of 1000 one-row requests takes at most ceil(1000/32)+1 dispatches") {
  Result<ScenarioReport> r = RunScenario(Parse(kBurst));
  REQUIRE(r.ok());
  CHECK(r->ferry.models[0].dispatches <= 33);
  CHECK(r->ferry.models[0].requests_completed == 1000);
  // The no-coalescing baseline pays one dispatch per request.
  CHECK(r->baselines[0].models[0].dispatches == 1000);
}

TEST_CASE("runs are deterministic for a seed and report the JSON fields the docs promise") {
  Scenario s = Parse(R"(
duration_seconds = 20
warmup_seconds = 2
[[models]]
name = "a"
weight = 3
cost = { noise = 0.1 }
[[models.arrivals]]
kind = "saturate"
[[models]]
name = "b"
[[models.arrivals]]
kind = "saturate"
)");
  Result<ScenarioReport> first = RunScenario(s);
  Result<ScenarioReport> second = RunScenario(s);
  REQUIRE(first.ok());
  CHECK(first->ferry.models[0].dispatches == second->ferry.models[0].dispatches);
  CHECK(first->ferry.models[0].share == doctest::Approx(0.75).epsilon(0.03));
  nlohmann::json j = ReportToJson(*first);
  for (const char* key :
       {"models", "jain", "utilization", "padding_waste", "decision_ns_median", "baselines"}) {
    CHECK_MESSAGE(j.contains(key), key);
  }
  for (const char* key :
       {"name", "weight", "share", "target_share", "throughput_rows_per_s", "queue_wait_p50_s",
        "queue_wait_p99_s", "deadline_misses", "dropped", "goodput_rows_per_s"}) {
    CHECK_MESSAGE(j["models"][0].contains(key), key);
  }
  CHECK(j["baselines"].size() == 2);
  CHECK(j["baselines"][1]["label"] == "baseline: round robin");
}

TEST_CASE("edf sheds under overload where fifo wastes the GPU on late requests") {
  Scenario s = Parse(R"(
duration_seconds = 10
warmup_seconds = 2
baselines = false
[scheduler]
discipline = "edf"
[[models]]
name = "m"
cost = { fixed_seconds = 0.0005, per_row_seconds = 0.00005 }
[[models.arrivals]]
kind = "poisson"
rate = 30000
deadline_seconds = 0.05
[[alternatives]]
label = "fifo"
discipline = "fifo"
)");
  Result<ScenarioReport> r = RunScenario(s);
  REQUIRE(r.ok());
  CHECK(r->ferry.goodput_vs_capacity >= 0.9);
  CHECK(r->ferry.missed_gpu_fraction <= 0.01);
  CHECK(r->alternatives[0].goodput_vs_capacity < r->ferry.goodput_vs_capacity);
}

}  // namespace
}  // namespace ferry::sim
