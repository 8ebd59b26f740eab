// ferryd's pure parts: the control protocol against hostile lines, the restart policy's
// backoff and crash-loop rule, device resolution against a fake driver directory, and who
// may use the control socket.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <string>

#include "control/control_protocol.h"
#include "supervisor/control_server.h"
#include "supervisor/devices.h"
#include "supervisor/restart_policy.h"
#include "tests/testing/temp_dir.h"

namespace ferry::supervisor {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;

TEST_CASE("control requests: every command round-trips through its encoding") {
  control::ControlRequest r;
  r.command = control::Command::kSetPolicy;
  r.model = "mlp";
  r.weight = 2.5;
  std::string line = control::EncodeControlRequest(r);
  REQUIRE(line.back() == '\n');
  line.pop_back();
  Result<control::ControlRequest> back = control::ParseControlRequest(line);
  REQUIRE(back.ok());
  CHECK(back->command == control::Command::kSetPolicy);
  CHECK(back->model == "mlp");
  CHECK(back->weight == 2.5);

  r.command = control::Command::kSetResidency;
  r.residency = Residency::kOnDemand;
  line = control::EncodeControlRequest(r);
  back = control::ParseControlRequest(line.substr(0, line.size() - 1));
  REQUIRE(back.ok());
  CHECK(back->residency == Residency::kOnDemand);

  r.command = control::Command::kSetDiscipline;
  r.discipline = Discipline::kEdf;
  line = control::EncodeControlRequest(r);
  back = control::ParseControlRequest(line.substr(0, line.size() - 1));
  REQUIRE(back.ok());
  CHECK(back->discipline == Discipline::kEdf);

  for (control::Command c : {control::Command::kStatus, control::Command::kSchedulerMetrics,
                             control::Command::kControlStatus, control::Command::kCompact,
                             control::Command::kReload, control::Command::kDrain}) {
    control::ControlRequest plain;
    plain.command = c;
    line = control::EncodeControlRequest(plain);
    back = control::ParseControlRequest(line.substr(0, line.size() - 1));
    REQUIRE(back.ok());
    CHECK(back->command == c);
  }
  for (control::Command c : {control::Command::kLoad, control::Command::kUnload}) {
    control::ControlRequest change;
    change.command = c;
    change.model = "resnet-50";
    line = control::EncodeControlRequest(change);
    back = control::ParseControlRequest(line.substr(0, line.size() - 1));
    REQUIRE(back.ok());
    CHECK(back->command == c);
    CHECK(back->model == "resnet-50");
  }
  control::ControlRequest tenant;
  tenant.command = control::Command::kSetTenant;
  tenant.tenant = "acme";
  tenant.weight = 2.5;
  line = control::EncodeControlRequest(tenant);
  back = control::ParseControlRequest(line.substr(0, line.size() - 1));
  REQUIRE(back.ok());
  CHECK(back->command == control::Command::kSetTenant);
  CHECK(back->tenant == "acme");
  CHECK(back->weight == 2.5);
  CHECK(control::ParseControlRequest(R"({"v": 1, "cmd": "load", "model": "../etc"})")
            .error()
            .message == "\"model\" is not a model name");
  CHECK(control::ParseControlRequest(R"({"v": 1, "cmd": "unload"})").error().message ==
        "\"model\" must be a string");
}

// Each hostile line is refused with a message naming what is wrong.
TEST_CASE("control requests: hostile lines are refused, never crash") {
  struct Case {
    std::string line;
    std::string says;
  };
  std::vector<Case> cases = {
      {"", "not JSON"},
      {"{", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {"\"status\"", "not a JSON object"},
      {R"({"cmd":"status"})", "\"v\" must be 1"},
      {R"({"v":2,"cmd":"status"})", "\"v\" must be 1"},
      {R"({"v":"1","cmd":"status"})", "\"v\" must be 1"},
      {R"({"v":1})", "\"cmd\" must be a string"},
      {R"({"v":1,"cmd":7})", "\"cmd\" must be a string"},
      {R"({"v":1,"cmd":"stats"})", "unknown command 'stats'"},
      {R"({"v":1,"cmd":"status","model":"x"})", "takes no argument 'model'"},
      {R"({"v":1,"cmd":"set_policy","model":"mlp"})", "\"weight\" must be a number"},
      {R"({"v":1,"cmd":"set_policy","model":"mlp","weight":"2"})", "\"weight\" must be a number"},
      {R"({"v":1,"cmd":"set_policy","model":"mlp","weight":0})", "finite and > 0"},
      {R"({"v":1,"cmd":"set_policy","model":"mlp","weight":-1})", "finite and > 0"},
      {R"({"v":1,"cmd":"set_policy","model":"mlp","weight":1e400})", "not JSON"},
      {R"({"v":1,"cmd":"set_policy","model":"../etc","weight":1})", "not a model name"},
      {R"({"v":1,"cmd":"set_policy","model":"","weight":1})", "not a model name"},
      {R"({"v":1,"cmd":"set_policy","weight":1})", "\"model\" must be a string"},
      {R"({"v":1,"cmd":"set_residency","model":"mlp","level":"hot"})", "pinned, warm or on_demand"},
      {R"({"v":1,"cmd":"set_discipline","discipline":"lifo"})", "fair, fifo or edf"},
      {R"({"v":1,"cmd":"set_tenant","weight":1})", "\"tenant\" must be a string"},
      {R"({"v":1,"cmd":"set_tenant","tenant":"a b","weight":1})", "not a tenant name"},
      {R"({"v":1,"cmd":"set_tenant","tenant":"acme"})", "\"weight\" must be a number"},
      {R"({"v":1,"cmd":"set_tenant","tenant":"acme","weight":0})", "finite and > 0"},
      {R"({"v":1,"cmd":"set_tenant","tenant":"acme","model":"m","weight":1})", "no argument"},
      {R"({"v":1,"cmd":"status","v":1,"x":[[[[[[[[[[1]]]]]]]]]]})", "nested too deeply"},
      {std::string(60000, '['), "nested too deeply"},
      {"{\"v\":1,\"cmd\":\"st\xff\xfe\"}", "not JSON"},
      {std::string(control::kMaxRequestBytes + 1, ' '), "longer than"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line.substr(0, 80));
    Result<control::ControlRequest> r = control::ParseControlRequest(c.line);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
    CHECK(r.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("control replies: results and errors survive the round trip; junk is INTERNAL") {
  Result<nlohmann::json> ok =
      control::DecodeReply(control::EncodeReply(nlohmann::json{{"workers", 2}}));
  REQUIRE(ok.ok());
  CHECK((*ok)["workers"] == 2);
  Result<nlohmann::json> err = control::DecodeReply(control::EncodeReply(NotFound("no model 'x'")));
  REQUIRE_FALSE(err.ok());
  CHECK(err.error().code == ErrorCode::kNotFound);
  CHECK(err.error().message == "no model 'x'");
  // Invalid UTF-8 in a message (a model's error text) is replaced, not thrown.
  Result<nlohmann::json> bad_utf8 =
      control::DecodeReply(control::EncodeReply(Internal("bad \xff byte")));
  REQUIRE_FALSE(bad_utf8.ok());
  CHECK(bad_utf8.error().message.find("bad") == 0);
  for (std::string junk : {"", "nope", "[]", R"({"ok":"yes"})"}) {
    Result<nlohmann::json> r = control::DecodeReply(junk);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kInternal);
  }
  // A mistyped error member is not a throw.
  Result<nlohmann::json> typed = control::DecodeReply(R"({"ok":false,"code":5,"error":[1]})");
  REQUIRE_FALSE(typed.ok());
  CHECK(typed.error().code == ErrorCode::kInternal);
}

SupervisorSettings Settings() {
  SupervisorSettings s;
  s.restart_backoff_ms = 100;
  s.restart_backoff_max_ms = 1000;
  s.crash_loop_restarts = 3;
  s.crash_loop_window_seconds = 60;
  return s;
}

TEST_CASE("restart policy: backoff doubles per consecutive death up to the maximum") {
  RestartPolicy p(Settings());
  int64_t t = 0;
  CHECK(p.OnDeath(t, t + 1 * kS) == 100 * kMs);
  CHECK(p.OnDeath(t, t + 2 * kS) == 200 * kMs);
  CHECK(p.OnDeath(t, t + 3 * kS) == 400 * kMs);
  CHECK_FALSE(p.CrashLooping(3 * kS));
  // The fourth death within the window: crash-looping, longest backoff.
  CHECK(p.OnDeath(t, t + 4 * kS) == 1000 * kMs);
  CHECK(p.CrashLooping(4 * kS));
  // Still looping while four deaths lie within the window; not once they have aged out.
  CHECK(p.CrashLooping(60 * kS));
  CHECK_FALSE(p.CrashLooping(62 * kS));
}

TEST_CASE("restart policy: a process that ran a whole window restarts at once again") {
  RestartPolicy p(Settings());
  CHECK(p.OnDeath(0, 1 * kS) == 100 * kMs);
  CHECK(p.OnDeath(1 * kS, 2 * kS) == 200 * kMs);
  // Up for 60 s: its next death is a first one.
  CHECK(p.OnDeath(2 * kS, 62 * kS) == 100 * kMs);
  CHECK(p.consecutive() == 1);
}

TEST_CASE("restart policy: the backoff never overflows past the maximum") {
  RestartPolicy p(Settings());
  int64_t delay = 0;
  for (int i = 0; i < 200; ++i) {
    delay = p.OnDeath(i * 100 * kS, i * 100 * kS + 1);  // Each a quick death, far apart.
    CHECK(delay > 0);
    CHECK(delay <= 1000 * kMs);
  }
}

TEST_CASE("devices: cpu:N, GPU lists and 'all' against a fake driver directory") {
  testing::TempDir dir;
  std::string gpus = dir / "gpus";
  NodeSettings node;
  node.devices.kind = DeviceSelection::Kind::kCpu;
  node.devices.cpu_workers = 3;
  Result<std::vector<WorkerDevice>> cpu = ResolveDevices(node, gpus);
  REQUIRE(cpu.ok());
  CHECK(cpu->size() == 3);
  CHECK_FALSE((*cpu)[0].gpu);

  node.devices.kind = DeviceSelection::Kind::kAllGpus;
  Result<std::vector<WorkerDevice>> none = ResolveDevices(node, gpus);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message.find("no GPU was found") != std::string::npos);

  // Two GPUs listed out of order, and a stray file that is not a GPU.
  std::filesystem::create_directories(gpus + "/0000:b1:00.0");
  std::filesystem::create_directories(gpus + "/0000:17:00.0");
  testing::WriteFile(gpus + "/README", "not a gpu");
  Result<std::vector<WorkerDevice>> all = ResolveDevices(node, gpus);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].gpu_id == 0);
  CHECK((*all)[0].pci_bus_id == "0000:17:00.0");  // PCI bus order.
  CHECK((*all)[1].pci_bus_id == "0000:b1:00.0");

  node.devices.kind = DeviceSelection::Kind::kGpuList;
  node.devices.gpu_ids = {1};
  Result<std::vector<WorkerDevice>> one = ResolveDevices(node, gpus);
  REQUIRE(one.ok());
  CHECK((*one)[0].Describe() == "GPU 1 (0000:b1:00.0)");
  node.devices.gpu_ids = {0, 2};
  Result<std::vector<WorkerDevice>> missing = ResolveDevices(node, gpus);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("GPU 2") != std::string::npos);
  // The simulator needs no GPU: the ids only name its workers.
  node.backend = BackendKind::kSim;
  CHECK(ResolveDevices(node, gpus).ok());
}

TEST_CASE("the control socket's missing directory is made (0750), one level only") {
  testing::TempDir dir;
  auto handler = [](const control::ControlRequest&) -> Result<nlohmann::json> {
    return nlohmann::json::object();
  };
  Result<ControlServer> server = ControlServer::Open(dir / "run/ctl.sock", "", handler);
  REQUIRE_MESSAGE(server.ok(), (server.ok() ? "" : server.error().message));
  struct stat st {};
  REQUIRE(stat((dir / "run").c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0750);
  Result<ControlServer> deeper = ControlServer::Open(dir / "a/b/ctl.sock", "", handler);
  REQUIRE_FALSE(deeper.ok());
  CHECK(deeper.error().message.find("create the control socket's directory") != std::string::npos);
}

TEST_CASE("control socket policy: root, ferryd's user and the group's members only") {
  PeerPolicy policy{1000, 2000};
  CHECK(policy.Allows(0, 0, {}));
  CHECK(policy.Allows(1000, 1000, {}));
  CHECK(policy.Allows(1001, 2000, {}));         // Primary group.
  CHECK(policy.Allows(1001, 1001, {5, 2000}));  // Supplementary group.
  CHECK_FALSE(policy.Allows(1001, 1001, {5, 6}));
  CHECK_FALSE(policy.Allows(65534, 65534, {}));
}

}  // namespace
}  // namespace ferry::supervisor
