#include "config/node_config.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <string>

namespace ferry {
namespace {

Result<NodeConfig> Parse(const std::string& text, const Environment& env = {}) {
  return ParseNodeConfig(text, "node.toml", "/etc/ferry", env);
}

std::string ErrorOf(const std::string& text, const Environment& env = {}) {
  Result<NodeConfig> result = Parse(text, env);
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().code == ErrorCode::kInvalidArgument);
  return result.error().message;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST_CASE("an empty node file gives every documented default") {
  Result<NodeConfig> config = Parse("");
  REQUIRE(config.ok());
  const SchedulerConfig& s = config->scheduler;
  CHECK(s.discipline == Discipline::kFair);
  CHECK(s.ema_halflife_seconds == 30.0);
  CHECK(s.recency_penalty_cap == 0.25);
  CHECK(s.deprecations.empty());
  CHECK(s.coalescing_discount == 0.10);
  CHECK(s.cost_ema_alpha == 0.2);
  CHECK(s.max_queue_depth == 1024);
  CHECK(s.dispatch_timeout_seconds == 30.0);
  CHECK(s.compaction_interval == 0);
  CHECK(s.ForModel("anything").weight == 1.0);
  CHECK_FALSE(s.ForModel("anything").max_batch_size.has_value());
  CHECK(config->node.http.port == 8000);
  CHECK(config->node.grpc.port == 8001);
  CHECK(config->node.metrics.port == 8002);
  CHECK(config->node.devices.kind == DeviceSelection::Kind::kAllGpus);
  CHECK(config->hooks.sandbox == SandboxMode::kStrict);
  CHECK(config->cpu.threads == 0);
  CHECK(config->cpu.pin == true);
}

TEST_CASE("a full node file is parsed into typed settings") {
  Result<NodeConfig> config = Parse(R"(
[node]
name = "edge-1"
devices = [0, 2]
hookhosts = 3
model_repository = "models"
shm_size = "512MiB"
[node.listen]
http = "127.0.0.1:9000"
grpc = "[::1]:9001"
metrics = "127.0.0.1:0"

[scheduler]
discipline = "edf"
ema_halflife_seconds = 10
cost_ema_alpha = 1.0
max_queue_depth = 16

[scheduler.models.mlp]
weight = 2.5
max_batch_size = 8
residency = "pinned"

[scheduler.models."mlp/3"]
weight = 4.0

[gateway]
mode = "lpt_packing"

[hooks]
sandbox = "off"
threads = 8

[cpu]
threads = 3
pin = false
)");
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().message));
  CHECK(config->node.name == "edge-1");
  CHECK(config->node.devices.kind == DeviceSelection::Kind::kGpuList);
  CHECK(config->node.devices.gpu_ids == std::vector<int64_t>{0, 2});
  CHECK(config->node.hookhosts == 3);
  CHECK(config->node.model_repository == "/etc/ferry/models");
  CHECK(config->node.shm_size == (uint64_t{512} << 20));
  CHECK(config->node.http.ToString() == "127.0.0.1:9000");
  CHECK(config->node.grpc.host == "::1");
  CHECK(config->node.metrics.port == 0);
  CHECK(config->scheduler.discipline == Discipline::kEdf);
  CHECK(config->scheduler.ema_halflife_seconds == 10.0);
  CHECK(config->scheduler.cost_ema_alpha == 1.0);
  CHECK(config->scheduler.max_queue_depth == 16);
  ModelSchedulingConfig mlp = config->scheduler.ForModel("mlp");
  CHECK(mlp.weight == 2.5);
  CHECK(mlp.max_batch_size == 8);
  CHECK(mlp.residency == Residency::kPinned);
  CHECK(config->gateway.mode == GatewayMode::kLptPacking);
  CHECK(config->gateway.stall_ms == 250);
  // A version inherits its model's settings unless it has its own.
  CHECK(config->scheduler.ForModel("mlp/2").weight == 2.5);
  CHECK(config->scheduler.ForModel("mlp/3").weight == 4.0);
  CHECK_FALSE(config->scheduler.ForModel("mlp/3").max_batch_size.has_value());
  CHECK(config->hooks.sandbox == SandboxMode::kOff);
  CHECK(config->hooks.threads == 8);
  CHECK(config->cpu.threads == 3);
  CHECK(config->cpu.pin == false);
}

TEST_CASE("devices accepts cpu:N and rejects malformed forms") {
  Result<NodeConfig> cpu = Parse("[node]\ndevices = \"cpu:2\"\n");
  REQUIRE(cpu.ok());
  CHECK(cpu->node.devices.kind == DeviceSelection::Kind::kCpu);
  CHECK(cpu->node.devices.cpu_workers == 2);
  CHECK(Contains(ErrorOf("[node]\ndevices = \"cpu:0\"\n"), "node.devices"));
  CHECK(Parse("[node]\ndevices = \"cpu:126\"\n").ok());  // As many as a segment holds.
  CHECK(Contains(ErrorOf("[node]\ndevices = \"cpu:127\"\n"), "integer in [1, 126]"));
  std::string ids = "[node]\ndevices = [";
  for (int i = 0; i < 127; ++i) {
    ids += std::to_string(i) + (i < 126 ? ", " : "]\n");
  }
  CHECK(Contains(ErrorOf(ids), "127 GPU ids, more than the 126"));
  CHECK(Parse("[node]\ndevices = [1023]\n").ok());
  CHECK(Contains(ErrorOf("[node]\ndevices = [1024]\n"), "node.devices"));
  CHECK(Contains(ErrorOf("[node]\ndevices = [-1]\n"), "node.devices"));
  CHECK(Contains(ErrorOf("[node]\ndevices = \"gpus\"\n"), "expected \"all\""));
  CHECK(Contains(ErrorOf("[node]\ndevices = [0, 0]\n"), "appears twice"));
  CHECK(Contains(ErrorOf("[node]\ndevices = []\n"), "empty"));
}

TEST_CASE("a TOML syntax error names the file, line and column") {
  std::string message = ErrorOf("[scheduler]\ndiscipline = \n");
  CHECK(Contains(message, "node.toml:2:"));
  CHECK(Contains(message, "TOML syntax error"));
}

TEST_CASE("a value of the wrong type is an error with position and key path") {
  std::string message = ErrorOf("[scheduler]\n\nmax_queue_depth = \"many\"\n");
  CHECK(Contains(message,
                 "node.toml:3:19: scheduler.max_queue_depth: expected an integer, "
                 "got string"));
}

TEST_CASE("out-of-range values are errors that state the allowed range") {
  CHECK(Contains(ErrorOf("[scheduler.models.a]\nweight = 0\n"),
                 "scheduler.models.a.weight: must be > 0, got 0"));
  CHECK(Contains(ErrorOf("[scheduler.models.a]\nweight = -1.5\n"), "must be > 0"));
  CHECK(Contains(ErrorOf("[scheduler]\ncost_ema_alpha = 0\n"),
                 "scheduler.cost_ema_alpha: must be in (0, 1], got 0"));
  CHECK(Contains(ErrorOf("[scheduler]\ncost_ema_alpha = 1.5\n"), "must be in (0, 1]"));
  CHECK(Contains(ErrorOf("[scheduler]\nema_halflife_seconds = 0.0\n"),
                 "scheduler.ema_halflife_seconds: must be > 0"));
  CHECK(Contains(ErrorOf("[scheduler]\ncoalescing_discount = 1.0\n"), "must be in [0, 1)"));
  CHECK(Contains(ErrorOf("[scheduler]\nmax_queue_depth = 0\n"), "must be >= 1"));
  CHECK(Contains(ErrorOf("[scheduler]\nrecency_penalty_cap = nan\n"), "must be in (0, 1]"));
  CHECK(Contains(ErrorOf("[node]\nshm_size = 4096\n"), "at least 1MiB"));
  CHECK(Contains(ErrorOf("[node]\nhookhosts = 0\n"), "node.hookhosts: must be in [1, 126]"));
  CHECK(Contains(ErrorOf("[node]\nhookhosts = 127\n"), "node.hookhosts: must be in [1, 126]"));
  CHECK(Parse("[node]\nhookhosts = 126\n").ok());
}

TEST_CASE("an unknown key is an error suggesting the nearest valid key") {
  std::string message = ErrorOf("[scheduler]\ndicipline = \"fifo\"\n");
  CHECK(Contains(message,
                 "node.toml:2:1: scheduler.dicipline: unknown key; did you mean "
                 "'discipline'?"));
  CHECK(Contains(ErrorOf("[scheduler.models.m]\nwieght = 2\n"), "did you mean 'weight'?"));
  CHECK(Contains(ErrorOf("[nodes]\n"), "nodes: unknown key; did you mean 'node'?"));
}

TEST_CASE("an unknown enum value lists the valid ones") {
  std::string message = ErrorOf("[scheduler]\ndiscipline = \"fiffo\"\n");
  CHECK(Contains(message,
                 "scheduler.discipline: unknown value 'fiffo' (expected one of fair, "
                 "fifo, edf); did you mean 'fifo'?"));
  CHECK(Contains(ErrorOf("[gateway]\nmode = \"random\"\n"), "gateway.mode: unknown value"));
  CHECK(Contains(ErrorOf("[gateway]\nstall_ms = 19\n"), "gateway.stall_ms"));
  CHECK(Contains(ErrorOf("[gateway]\nstall_ms = 60001\n"), "gateway.stall_ms"));
  Result<NodeConfig> stall = Parse("[gateway]\nstall_ms = 100\n");
  REQUIRE(stall.ok());
  CHECK(stall->gateway.stall_ms == 100);
  CHECK(Contains(ErrorOf("[scheduler.models.m]\nresidency = \"hot\"\n"),
                 "scheduler.models.m.residency: unknown value 'hot'"));
}

TEST_CASE("every error in a file is reported at once") {
  std::string message = ErrorOf(R"([scheduler]
discipline = "lottery"
cost_ema_alpha = 2
bogus = 1
[scheduler.models.m]
weight = 0
)");
  CHECK(Contains(message, "scheduler.discipline"));
  CHECK(Contains(message, "scheduler.cost_ema_alpha"));
  CHECK(Contains(message, "scheduler.bogus"));
  CHECK(Contains(message, "scheduler.models.m.weight"));
  CHECK(std::count(message.begin(), message.end(), '\n') == 3);
}

TEST_CASE("FERRY_SCHEDULER_<KEY> overrides the file") {
  Result<NodeConfig> config = Parse("[scheduler]\ndiscipline = \"fair\"\nmax_queue_depth = 4\n",
                                    {{"FERRY_SCHEDULER_DISCIPLINE", "fifo"},
                                     {"FERRY_SCHEDULER_MAX_QUEUE_DEPTH", "99"},
                                     {"FERRY_SCHEDULER_COST_EMA_ALPHA", "0.5"}});
  REQUIRE(config.ok());
  CHECK(config->scheduler.discipline == Discipline::kFifo);
  CHECK(config->scheduler.max_queue_depth == 99);
  CHECK(config->scheduler.cost_ema_alpha == 0.5);
}

TEST_CASE("residency_mode and batch_sizing are read from the file and the environment") {
  Result<NodeConfig> config = Parse("[scheduler]\nresidency_mode = \"external\"\n",
                                    {{"FERRY_SCHEDULER_BATCH_SIZING", "cost"}});
  REQUIRE(config.ok());
  CHECK(config->scheduler.residency_mode == ResidencyMode::kExternal);
  CHECK(config->scheduler.batch_sizing == BatchSizing::kCost);
  CHECK(Parse("").value().scheduler.batch_sizing == BatchSizing::kLargest);
  CHECK(Contains(ErrorOf("[scheduler]\nbatch_sizing = \"biggest\"\n"),
                 "scheduler.batch_sizing: unknown value 'biggest'"));
}

TEST_CASE("a bad environment override names the variable") {
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_DISCIPLINE", "lottery"}}),
                 "environment FERRY_SCHEDULER_DISCIPLINE: scheduler.discipline: unknown value "
                 "'lottery'"));
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_COST_EMA_ALPHA", "7"}}),
                 "environment FERRY_SCHEDULER_COST_EMA_ALPHA: scheduler.cost_ema_alpha: must be "
                 "in (0, 1]"));
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_MAX_QUEUE_DEPTH", "lots"}}),
                 "environment FERRY_SCHEDULER_MAX_QUEUE_DEPTH: scheduler.max_queue_depth: not a "
                 "valid value 'lots'"));
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_DISCIPLIN", "fifo"}}),
                 "did you mean FERRY_SCHEDULER_DISCIPLINE?"));
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_COST_EMA_ALPHA", "0.5\nbogus = 1"}}), "one line"));
}

TEST_CASE("the node's name: 1 to 64 letters, digits, '-' or '_'; the repository not empty") {
  CHECK(Parse("[node]\nname = \"gpu-host_7\"\n").value().node.name == "gpu-host_7");
  for (const char* bad : {"a b", "a/b", "a.b", "h\\u00e9"}) {
    CAPTURE(bad);
    CHECK(Contains(ErrorOf("[node]\nname = \"" + std::string(bad) + "\"\n"), "node.name: '"));
  }
  CHECK(Contains(ErrorOf("[node]\nname = \"\"\n"), "use 1 to 64 letters"));
  CHECK(Contains(ErrorOf("[node]\nname = \"" + std::string(65, 'a') + "\"\n"),
                 "use 1 to 64 letters"));
  CHECK(Parse("[node]\nname = \"" + std::string(64, 'a') + "\"\n").ok());
  CHECK(Contains(ErrorOf("[node]\nmodel_repository = \"\"\n"),
                 "node.model_repository: must not be empty"));
}

TEST_CASE("listen addresses must be HOST:PORT and distinct") {
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"localhost\"\n"),
                 "node.listen.http: 'localhost': expected HOST:PORT"));
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"h:70000\"\n"), "PORT in [0, 65535]"));
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"0.0.0.0:8001\"\n"), "two listeners share"));
}

TEST_CASE("listen addresses: a port is required, brackets only around an IPv6 literal") {
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"8000\"\n"), "expected HOST:PORT"));
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \":8000\"\n"),
                 "node.listen.http: ':8000': the host is empty (expected HOST:PORT"));
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"X::1]:8000\"\n"), "expected HOST:PORT"));
  // A closing bracket without the opening one is not an IPv6 literal, whatever comes first.
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"b::1]:8000\"\n"), "expected HOST:PORT"));
  CHECK(Contains(ErrorOf("[node.listen]\nhttp = \"[::1:8000\"\n"), "expected HOST:PORT"));
  Result<NodeConfig> v6 = Parse("[node.listen]\nhttp = \"[::1]:0\"\n");
  REQUIRE(v6.ok());
  CHECK(v6->node.http.host == "::1");
  CHECK(v6->node.http.port == 0);
  Result<NodeConfig> edge = Parse("[node.listen]\nhttp = \"h-1.example:65535\"\n");
  REQUIRE(edge.ok());
  CHECK(edge->node.http.port == 65535);
}

TEST_CASE("environment overrides: only exact-prefix variables, one non-empty line each") {
  // The prefix must open the name; a variable that merely contains it twice is still ours.
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_FERRY_SCHEDULER_X", "1"}}),
                 "scheduler.ferry_scheduler_x: no such scheduler key"));
  CHECK(Parse("", {{"XFERRY_SCHEDULER_DISCIPLINE", "lottery"}}).ok());  // Not ours.
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_MAX_QUEUE_DEPTH", ""}}),
                 "value must be one line, non-empty, without '#'"));
  CHECK(Contains(ErrorOf("", {{"FERRY_SCHEDULER_MAX_QUEUE_DEPTH", "5 # five"}}), "without '#'"));
  // SchedulerEnvironment reads the process environment.
  setenv("FERRY_SCHEDULER_MAX_QUEUE_DEPTH", "7", 1);
  setenv("FERRY_OTHER", "1", 1);
  Environment env = SchedulerEnvironment();
  unsetenv("FERRY_SCHEDULER_MAX_QUEUE_DEPTH");
  unsetenv("FERRY_OTHER");
  REQUIRE(env.count("FERRY_SCHEDULER_MAX_QUEUE_DEPTH") == 1);
  CHECK(env.at("FERRY_SCHEDULER_MAX_QUEUE_DEPTH") == "7");
  CHECK(env.count("FERRY_OTHER") == 0);
}

TEST_CASE("shm_size: 1MiB to 1TiB, both edges") {
  CHECK(Parse("[node]\nshm_size = \"1TiB\"\n").value().node.shm_size == uint64_t{1} << 40);
  CHECK(Contains(ErrorOf("[node]\nshm_size = \"1025GiB\"\n"), "must be at most 1TiB"));
  CHECK(Parse("[node]\nshm_size = 1048576\n").value().node.shm_size == 1048576);
  CHECK(Contains(ErrorOf("[node]\nshm_size = 1048575\n"), "must be at least 1MiB"));
}

TEST_CASE("worker.weight_budget: none by default, 1MiB to 1TiB") {
  CHECK(Parse("").value().worker.weight_budget == 0);
  CHECK(Parse("[worker]\nweight_budget = \"64MiB\"\n").value().worker.weight_budget == 64 << 20);
  CHECK(Contains(ErrorOf("[worker]\nweight_budget = 1000\n"), "must be at least 1MiB"));
  CHECK(Contains(ErrorOf("[worker]\nweight_budget = \"2TiB\"\n"), "must be at most 1TiB"));
  CHECK(Contains(ErrorOf("[worker]\nweight_budgets = 1\n"), "weight_budgets"));
  CHECK(Parse("").value().worker.eviction == WorkerSettings::Eviction::kLru);
  CHECK(Parse("[worker]\neviction = \"all\"\n").value().worker.eviction ==
        WorkerSettings::Eviction::kAll);
  CHECK(Contains(ErrorOf("[worker]\neviction = \"random\"\n"), "eviction"));
  CHECK(Parse("").value().worker.max_load_fraction == 0.25);
  CHECK(Parse("[worker]\nmax_load_fraction = 1.0\n").value().worker.max_load_fraction == 1.0);
  CHECK(Contains(ErrorOf("[worker]\nmax_load_fraction = 0.0\n"), "max_load_fraction"));
}

TEST_CASE("hooks.max_memory: 64MiB to 1TiB, 8GiB by default") {
  CHECK(Parse("").value().hooks.max_memory == uint64_t{8} << 30);
  CHECK(Parse("[hooks]\nmax_memory = \"64MiB\"\n").value().hooks.max_memory == 64 << 20);
  CHECK(Parse("[hooks]\nmax_memory = \"1TiB\"\n").value().hooks.max_memory == uint64_t{1} << 40);
  CHECK(Contains(ErrorOf("[hooks]\nmax_memory = 67108863\n"), "must be at least 64MiB"));
  CHECK(Contains(ErrorOf("[hooks]\nmax_memory = \"1025GiB\"\n"), "must be at most 1TiB"));
  CHECK(Contains(ErrorOf("[hooks]\nmax_memory = true\n"), "expected bytes"));
}

TEST_CASE("hooks: threads, call_timeout_ms and max_pending at both edges") {
  NodeConfig defaults = Parse("").value();
  CHECK(defaults.hooks.call_timeout_ms == 1000);
  CHECK(defaults.hooks.max_pending == 4096);
  NodeConfig edges =
      Parse("[hooks]\nthreads = 1024\ncall_timeout_ms = 600000\nmax_pending = 1048576\n").value();
  CHECK(edges.hooks.threads == 1024);
  CHECK(edges.hooks.call_timeout_ms == 600000);
  CHECK(edges.hooks.max_pending == 1048576);
  CHECK(Parse("[hooks]\ncall_timeout_ms = 1\nmax_pending = 1\n").value().hooks.max_pending == 1);
  CHECK(Contains(ErrorOf("[hooks]\nthreads = 0\n"), "hooks.threads: must be in [1, 1024]"));
  CHECK(Contains(ErrorOf("[hooks]\ncall_timeout_ms = 0\n"), "hooks.call_timeout_ms"));
  CHECK(Contains(ErrorOf("[hooks]\ncall_timeout_ms = 600001\n"), "hooks.call_timeout_ms"));
  CHECK(Contains(ErrorOf("[hooks]\nmax_pending = 0\n"), "hooks.max_pending"));
  CHECK(Contains(ErrorOf("[hooks]\nmax_pending = 1048577\n"), "hooks.max_pending"));
  CHECK(defaults.hooks.spin_us == -1);  // Absent: the hook host decides by its CPUs.
  CHECK(Parse("[hooks]\nspin_us = 0\n").value().hooks.spin_us == 0);
  CHECK(Parse("[hooks]\nspin_us = 10000\n").value().hooks.spin_us == 10000);
  CHECK(Contains(ErrorOf("[hooks]\nspin_us = -1\n"), "hooks.spin_us"));
  CHECK(Contains(ErrorOf("[hooks]\nspin_us = 10001\n"), "hooks.spin_us"));
  CHECK(defaults.worker.spin_us == -1);  // Absent: the worker decides by its CPUs.
  CHECK(Parse("[worker]\nspin_us = 0\n").value().worker.spin_us == 0);
  CHECK(Parse("[worker]\nspin_us = 10000\n").value().worker.spin_us == 10000);
  CHECK(Contains(ErrorOf("[worker]\nspin_us = -1\n"), "worker.spin_us"));
  CHECK(Contains(ErrorOf("[worker]\nspin_us = 10001\n"), "worker.spin_us"));
}

TEST_CASE("cpu threads 0 to 1024 and [sim.models] costs are read") {
  CHECK(Parse("[cpu]\nthreads = 1024\n").value().cpu.threads == 1024);
  CHECK(Contains(ErrorOf("[cpu]\nthreads = 1025\n"), "cpu.threads"));
  Result<NodeConfig> sim =
      Parse("[sim]\nfixed_us = 10\n[sim.models.a]\nper_row_us = 3\n[sim.models.b]\nfixed_us = 7\n");
  REQUIRE(sim.ok());
  REQUIRE(sim->sim.models.size() == 2);
  CHECK(sim->sim.models.at("a").fixed_us == 10);  // Inherited from [sim].
  CHECK(sim->sim.models.at("a").per_row_us == 3);
  CHECK(sim->sim.models.at("b").fixed_us == 7);
  CHECK(Contains(ErrorOf("[sim.models.\"a b\"]\nfixed_us = 1\n"), "not a model name"));
  CHECK(Contains(ErrorOf("[scheduler.models.\"mlp/02\"]\nweight = 1\n"), "NAME/V"));
  CHECK(Contains(ErrorOf("[scheduler.models.\"mlp/1/2\"]\nweight = 1\n"), "NAME/V"));
}

TEST_CASE("byte sizes take binary units and reject garbage") {
  CHECK(ParseByteSize("1TiB").value() == uint64_t{1} << 40);
  CHECK(ParseByteSize("3T").value() == uint64_t{3} << 40);
  CHECK(ParseByteSize("5G").value() == uint64_t{5} << 30);
  CHECK(ParseByteSize("7M").value() == uint64_t{7} << 20);
  CHECK(ParseByteSize("9MiB").value() == uint64_t{9} << 20);
  CHECK(ParseByteSize("2KiB").value() == 2048);
  CHECK(ParseByteSize("11B").value() == 11);
  CHECK(ParseByteSize("16777215TiB").value() == uint64_t{16777215} << 40);  // The largest.
  CHECK(ParseByteSize("16777216TiB").error().message.find("too large") != std::string::npos);
  CHECK(ParseByteSize("1PiB").error().message.find("unknown unit 'PiB'") != std::string::npos);
  CHECK(ParseByteSize("1Mi").error().message.find("unknown unit") != std::string::npos);
  CHECK(ParseByteSize("2GiB").value() == (uint64_t{2} << 30));
  CHECK(ParseByteSize("64K").value() == 65536);
  CHECK(ParseByteSize("123").value() == 123);
  CHECK_FALSE(ParseByteSize("12 parsecs").ok());
  CHECK_FALSE(ParseByteSize("MiB").ok());
  CHECK_FALSE(ParseByteSize("99999999999999TiB").ok());
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST_CASE(
    "recency_penalty_cap is still checked but deprecated with a warning naming the replacement") {
  Result<NodeConfig> config =
      ParseNodeConfig("[scheduler]\nrecency_penalty_cap = 0.5\n", "n.toml", "/tmp", {});
  REQUIRE(config.ok());
  REQUIRE(config->scheduler.deprecations.size() == 1);
  CHECK(config->scheduler.deprecations[0].find("start-time fair queueing") != std::string::npos);
  Result<NodeConfig> env =
      ParseNodeConfig("", "n.toml", "/tmp", {{"FERRY_SCHEDULER_RECENCY_PENALTY_CAP", "0.3"}});
  REQUIRE(env.ok());
  CHECK(env->scheduler.deprecations.size() == 1);
  CHECK(ParseNodeConfig("", "n.toml", "/tmp", {})->scheduler.deprecations.empty());
}

TEST_CASE("[frontend] model_control and [trace]: off unless the node file turns them on") {
  Result<NodeConfig> defaults = Parse("");
  REQUIRE(defaults.ok());
  CHECK(!defaults->frontend.model_control);         // Load and unload over the KServe port: off.
  CHECK(defaults->trace.otlp_endpoint.empty());     // No tracing unless a collector is named.
  CHECK(!defaults->frontend.system_shared_memory);  // ferryd opens no client object: off.
  Result<NodeConfig> control =
      Parse("[frontend]\nmodel_control = true\nsystem_shared_memory = true\n");
  REQUIRE(control.ok());
  CHECK(control->frontend.model_control);
  CHECK(control->frontend.system_shared_memory);
  CHECK(!Parse("[frontend]\nsystem_shared_memory = 1\n").ok());
  Result<NodeConfig> trace = Parse(
      "[trace]\notlp_endpoint = \"http://127.0.0.1:4318\"\nlevel = \"timestamps\"\n"
      "rate = 1\ncount = 67108862\n");
  REQUIRE(trace.ok());
  CHECK(trace->trace.timestamps);
  CHECK(trace->trace.rate == 1);
  CHECK(trace->trace.count == 67108862);
}

TEST_CASE("[supervisor] and [frontend]: defaults, values at their edges, each mistake named") {
  Result<NodeConfig> defaults = Parse("");
  REQUIRE(defaults.ok());
  CHECK(defaults->supervisor.control_socket == "/run/ferry/control.sock");
  CHECK(defaults->supervisor.restart_backoff_ms == 100);
  CHECK(defaults->supervisor.crash_loop_restarts == 5);
  CHECK(defaults->supervisor.drain_timeout_seconds == 30);
  CHECK(defaults->supervisor.drain_notice_seconds == 0);
  CHECK(defaults->frontend.max_request_bytes == (64u << 20));
  CHECK(defaults->frontend.max_connections == 1024);
  CHECK(defaults->frontend.max_streams_per_connection == 100);
  CHECK(defaults->frontend.max_inflate_ratio == 100);

  Result<NodeConfig> edges =
      Parse("[supervisor]\ncontrol_socket = \"/" + std::string(106, 's') +
            "\"\ncontrol_group = \"ferry\"\nrestart_backoff_ms = 1\nrestart_backoff_max_ms = 1\n"
            "crash_loop_restarts = 1000\ncrash_loop_window_seconds = 86400\n"
            "drain_timeout_seconds = 0\nstart_timeout_seconds = 1\n"
            "[frontend]\nmax_request_bytes = 1024\nmax_connections = 65536\n"
            "max_streams_per_connection = 1\n"
            "request_timeout_seconds = 0.1\nidle_timeout_seconds = 86400\n");
  REQUIRE_MESSAGE(edges.ok(), (edges.ok() ? "" : edges.error().message));
  CHECK(edges->supervisor.control_socket.size() == 107);
  CHECK(edges->supervisor.drain_timeout_seconds == 0);
  CHECK(edges->frontend.max_request_bytes == 1024);
  CHECK(edges->frontend.request_timeout_seconds == 0.1);
  CHECK(edges->frontend.max_streams_per_connection == 1);
  Result<NodeConfig> usual =
      Parse("[supervisor]\ncontrol_socket = \"/run/f.sock\"\nstart_timeout_seconds = 86400\n");
  REQUIRE_MESSAGE(usual.ok(), (usual.ok() ? "" : usual.error().message));
  CHECK(usual->supervisor.control_socket == "/run/f.sock");
  CHECK(usual->supervisor.start_timeout_seconds == 86400);
  CHECK(Contains(ErrorOf("[supervisor]\ncontrol_socket = \"./f.sock\"\n"),
                 "supervisor.control_socket: must be an absolute path"));
  Result<NodeConfig> short_idle = Parse("[frontend]\nidle_timeout_seconds = 0.1\n");
  REQUIRE_MESSAGE(short_idle.ok(), (short_idle.ok() ? "" : short_idle.error().message));
  CHECK(short_idle->frontend.idle_timeout_seconds == 0.1);
  CHECK(Contains(ErrorOf("[frontend]\nidle_timeout_seconds = 0.09\n"),
                 "frontend.idle_timeout_seconds"));

  struct Case {
    std::string text;
    std::string key;
  };
  std::vector<Case> cases = {
      {"[supervisor]\ncontrol_socket = \"run/ferry.sock\"\n", "supervisor.control_socket"},
      {"[supervisor]\ncontrol_socket = \"/" + std::string(107, 's') + "\"\n",
       "supervisor.control_socket"},
      {"[supervisor]\ncontrol_group = \"a b\"\n", "supervisor.control_group"},
      {"[supervisor]\nrestart_backoff_ms = 0\n", "supervisor.restart_backoff_ms"},
      {"[supervisor]\nrestart_backoff_ms = 500\nrestart_backoff_max_ms = 499\n",
       "supervisor.restart_backoff_max_ms"},
      {"[supervisor]\ncrash_loop_restarts = 1001\n", "supervisor.crash_loop_restarts"},
      {"[supervisor]\ncrash_loop_window_seconds = 0\n", "supervisor.crash_loop_window_seconds"},
      {"[supervisor]\ndrain_timeout_seconds = -1\n", "supervisor.drain_timeout_seconds"},
      {"[supervisor]\ndrain_notice_seconds = 601\n", "supervisor.drain_notice_seconds"},
      {"[supervisor]\nstart_timeout_seconds = 0.5\n", "supervisor.start_timeout_seconds"},
      {"[supervisor]\nrestart_after = 1\n", "supervisor.restart_after"},
      {"[frontend]\nmax_request_bytes = 1023\n", "frontend.max_request_bytes"},
      {"[frontend]\nmax_connections = 0\n", "frontend.max_connections"},
      {"[frontend]\nmax_streams_per_connection = 0\n", "frontend.max_streams_per_connection"},
      {"[frontend]\nmax_inflate_ratio = -1\n", "frontend.max_inflate_ratio"},
      {"[frontend]\nmax_streams_per_connection = 65537\n", "frontend.max_streams_per_connection"},
      {"[frontend]\nrequest_timeout_seconds = 0.05\n", "frontend.request_timeout_seconds"},
      {"[frontend]\nidle_timeout_seconds = 86401\n", "frontend.idle_timeout_seconds"},
      {"[frontend]\nmodel_control = \"explicit\"\n", "frontend.model_control"},
      {"[trace]\notlp_endpoint = \"https://c:4318\"\n", "trace.otlp_endpoint"},
      {"[trace]\notlp_endpoint = \"http://c\"\n", "trace.otlp_endpoint"},
      {"[trace]\nlevel = \"tensors\"\n", "trace.level"},
      {"[trace]\nrate = 0\n", "trace.rate"},
      {"[trace]\ncount = -2\n", "trace.count"},
      {"[trace]\nfile = \"/tmp/x\"\n", "trace.file"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(Contains(ErrorOf(c.text), c.key));
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST_CASE("model names: letters, digits, '_', '-', '.', never starting with '-' or '.'") {
  for (const char* ok : {"mlp", "resnet-50.v2", "_x", "9lives"}) {
    CAPTURE(ok);
    CHECK(IsValidModelName(ok));
  }
  // "-" marks an unloaded index in ferryd's model table; ".", ".." leave the repository.
  for (const char* bad : {"", "-", "-x", ".", "..", ".hidden", "a/b", "a b", "é"}) {
    CAPTURE(bad);
    CHECK_FALSE(IsValidModelName(bad));
  }
  CHECK_FALSE(IsValidModelName(std::string(129, 'a')));
  CHECK(IsValidModelName(std::string(128, 'a')));
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST_CASE("[frontend] tenants: up to 16 distinct names; none by default") {
  CHECK(Parse("").value().frontend.tenants.empty());
  Result<NodeConfig> two = Parse("[frontend]\ntenants = [\"acme\", \"globex-2\"]\n");
  REQUIRE(two.ok());
  CHECK(two->frontend.tenants == std::vector<std::string>{"acme", "globex-2"});
  std::string sixteen = "[frontend]\ntenants = [";
  for (int i = 0; i < 16; ++i) {
    sixteen += (i == 0 ? "\"t" : ", \"t") + std::to_string(i) + "\"";
  }
  CHECK(Parse(sixteen + "]\n").ok());
  CHECK(Contains(ErrorOf(sixteen + ", \"t16\"]\n"), "at most 16 tenants"));
  CHECK(Contains(ErrorOf("[frontend]\ntenants = [\"a\", \"a\"]\n"), "or is listed twice"));
  CHECK(Contains(ErrorOf("[frontend]\ntenants = [\"a b\"]\n"), "'a b' is not a tenant name"));
  CHECK(Contains(ErrorOf("[frontend]\ntenants = [\"-\"]\n"), "frontend.tenants"));
  CHECK(Contains(ErrorOf("[frontend]\ntenants = \"acme\"\n"), "frontend.tenants"));
}

}  // namespace
}  // namespace ferry
