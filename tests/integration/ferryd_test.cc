// ferryd end to end: real ferryd, ferry-worker and ferry-hookhost processes on a real segment,
// controlled through the real control socket. Workers run the simulated backend (fast to
// start, no GPU) unless a test says otherwise.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "net/http_client.h"
#include "shm/segment.h"
#include "shm/status.h"
#include "supervisor/control_server.h"
#include "tests/testing/ferryd_process.h"

namespace ferry::testing {
namespace {

using control::Command;
using control::ControlRequest;
using nlohmann::json;

constexpr const char* kSimNode = "devices = \"cpu:2\"\nhookhosts = 2\nbackend = \"sim\"\n";
// Quick restarts, and a short heartbeat limit for the watchdog test.
constexpr const char* kQuick =
    "restart_backoff_ms = 20\nrestart_backoff_max_ms = 200\ndrain_timeout_seconds = 10\n"
    "[scheduler]\ndispatch_timeout_seconds = 2.0\n";

int64_t PidOf(const json& status, const std::string& kind, int index) {
  return ChildOf(status, kind, index)["pid"].get<int64_t>();
}

bool Restarted(const json& s, const std::string& kind, int index, int64_t old_pid) {
  json c = ChildOf(s, kind, index);
  return s["state"] == "ready" && c["pid"].get<int64_t>() != old_pid &&
         c["restarts"].get<int64_t>() >= 1;
}

// The names of process `pid`'s threads (their comm), as top -H and ps -L show them.
std::set<std::string> ThreadNames(pid_t pid) {
  std::set<std::string> names;
  std::error_code ignored;
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ignored)) {
    std::string name = ReadFileText(task.path().string() + "/comm");
    names.insert(name.substr(0, name.find('\n')));
  }
  return names;
}

ControlRequest Request(Command command) {
  ControlRequest r;
  r.command = command;
  return r;
}

TEST_CASE("ferryd starts the node, reports it ready, and stops cleanly on SIGTERM") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  CHECK((*ready)["ready"] == true);
  CHECK((*ready)["children"].size() == 4);
  std::string segment = shm::Segment::NameForNode(ferryd.name());
  CHECK(ShmExists(segment));
  std::vector<pid_t> pids;
  for (const json& c : (*ready)["children"]) {
    CHECK(c["state"] == "ready");
    pids.push_back(static_cast<pid_t>(c["pid"].get<int64_t>()));
  }
  // Each worker serves both example models.
  json worker = ChildOf(*ready, "worker", 1);
  REQUIRE(worker["models"].size() == 2);
  CHECK(worker["models"][0]["model"] == "cnn");
  CHECK(worker["models"][1]["state"] == "ready");

  // /metrics: every family there, labelled by model and gpu, and promtool finds no problem.
  Result<net::HttpClient> client =
      net::HttpClient::Connect((*ready)["listen"]["metrics"].get<std::string>());
  REQUIRE(client.ok());
  Result<net::HttpAnswer> metrics = client->Request("GET", "/metrics");
  REQUIRE(metrics.ok());
  CHECK(metrics->status == 200);
  for (const char* line :
       {"# TYPE ferry_requests_total counter", "ferry_queue_depth{gpu=\"1\",model=\"mlp\"} 0",
        "ferry_process_up{index=\"0\",kind=\"worker\"} 1", "ferry_node_ready 1",
        "ferry_arena_bytes_in_use{index=\"1\",kind=\"hookhost\"}",
        "ferry_requests_total{gpu=\"0\",model=\"cnn\",outcome=\"shed\"} 0",
        "ferry_model_loads_total{gpu=\"1\"} 2", "ferry_model_load_failures_total{gpu=\"0\"} 0",
        "ferry_model_residency{gpu=\"0\",model=\"mlp\",residency=\"warm\"} 1"}) {
    CHECK_MESSAGE(metrics->body.find(line) != std::string::npos, std::string(line));
  }
  WriteFile(dir / "metrics.txt", metrics->body);
  std::string promtool = "promtool check metrics < " + (dir / "metrics.txt") + " > " +
                         (dir / "promtool.txt") + " 2>&1";
  int promtool_status = std::system(promtool.c_str());
  CHECK_MESSAGE(WEXITSTATUS(promtool_status) == 0, ReadFileText(dir / "promtool.txt"));
  Result<net::HttpAnswer> other = client->Request("GET", "/elsewhere");
  REQUIRE(other.ok());
  CHECK(other->status == 404);

  // The threads an operator looks for in top -H carry their names, inside the hook host's
  // sandbox too.
  std::set<std::string> hookhost = ThreadNames(static_cast<pid_t>(PidOf(*ready, "hookhost", 0)));
  for (const char* name : {"ferry-transport", "ferry-hook", "ferry-http", "ferry-grpc-cq"}) {
    CHECK_MESSAGE(hookhost.count(name) == 1, name);
  }
  CHECK(ThreadNames(ferryd.pid()).count("ferry-metrics") == 1);

  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
  for (pid_t p : pids) {
    CHECK(ProcessGone(p));
  }
  // No shared memory left behind: neither the supervisor's object nor any slot's.
  CHECK_FALSE(ShmExists(segment));
  for (uint32_t slot = 0; slot < 4; ++slot) {
    CHECK_FALSE(ShmExists(shm::Segment::ObjectName(segment, slot)));
  }
  CHECK_FALSE(std::filesystem::exists(ferryd.socket()));
  std::string log = ferryd.log();
  CHECK(log.find("hook host 0 (slot 0) (pid") != std::string::npos);
  CHECK(log.find("exited: exit 0") != std::string::npos);
}

// One agent check: what the listener at `address` says before it closes the connection.
std::string AgentCheck(const std::string& address) {
  size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  REQUIRE(inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr) == 1);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  timeval t{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
  std::string said;
  char buffer[64];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    said.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return said;
}

TEST_CASE("a balancer's view: the agent check and /v2/ferry/load say up, weight 100, idle") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  std::string agent = (*ready)["listen"]["agent"].get<std::string>();
  REQUIRE_FALSE(agent.empty());
  CHECK(AgentCheck(agent) == "up 100%\n");
  CHECK(AgentCheck(agent) == "up 100%\n");  // Every connection gets its line.
  Result<net::HttpClient> client =
      net::HttpClient::Connect((*ready)["listen"]["http"].get<std::string>());
  REQUIRE(client.ok());
  Result<net::HttpAnswer> load = client->Request("GET", "/v2/ferry/load");
  REQUIRE(load.ok());
  CHECK(load->status == 200);
  json body = json::parse(load->body);
  CHECK(body["state"] == "up");
  CHECK(body["weight"] == 100);
  REQUIRE(body["workers"].size() == 2);
  CHECK(body["workers"][1]["ready"] == true);
  CHECK(client->Request("POST", "/v2/ferry/load", "{}")->status == 405);
}

TEST_CASE("during a drain notice readiness and /v2/ferry/load say drain; requests are served") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, std::string("drain_notice_seconds = 3\n") + kQuick);
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  Result<net::HttpClient> client =
      net::HttpClient::Connect((*ready)["listen"]["http"].get<std::string>());
  REQUIRE(client.ok());
  CHECK(client->Request("GET", "/v2/health/ready")->status == 200);
  kill(ferryd.pid(), SIGTERM);
  std::string agent = (*ready)["listen"]["agent"].get<std::string>();
  for (int i = 0; i < 200 && AgentCheck(agent) != "drain\n"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(AgentCheck(agent) == "drain\n");
  // The hook hosts see it too (before: they answered "up" and ready until the notice ended).
  json load = json::parse(client->Request("GET", "/v2/ferry/load")->body);
  CHECK(load["state"] == "drain");
  CHECK(client->Request("GET", "/v2/health/ready")->status == 400);
  CHECK(client->Request("GET", "/v2/models/mlp/ready")->status == 400);
  CHECK(client->Request("GET", "/v2/health/live")->status == 200);  // Still serving.
  CHECK(ferryd.Wait() == 0);
}

TEST_CASE("a killed worker or hook host is reset and restarted; a stopped worker is killed") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  std::string segment = shm::Segment::NameForNode(ferryd.name());

  SUBCASE("SIGKILL of a worker") {
    int64_t pid = PidOf(*ready, "worker", 0);
    uint64_t generation = ChildOf(*ready, "worker", 0)["generation"].get<uint64_t>();
    kill(static_cast<pid_t>(pid), SIGKILL);
    std::optional<json> back =
        ferryd.StatusWhen([&](const json& s) { return Restarted(s, "worker", 0, pid); });
    REQUIRE_MESSAGE(back, ferryd.log());
    json c = ChildOf(*back, "worker", 0);
    CHECK(c["last_exit"] == "killed by SIGKILL");
    CHECK(c["generation"].get<uint64_t>() == generation + 1);  // ResetSlot ran.
    // The other worker was left alone.
    CHECK(PidOf(*back, "worker", 1) == PidOf(*ready, "worker", 1));
    // Its successor's arena starts empty: the dead one's accounting was reset.
    Result<shm::Segment> view = shm::Segment::Attach(segment, shm::kSupervisor);
    REQUIRE(view.ok());
    CHECK(view->accounting(view->WorkerSlot(0)).bytes_in_use.load() == 0);
  }
  SUBCASE("SIGKILL of a hook host") {
    // Its request counters are cumulative: ResetSlot leaves them for its successor.
    Result<shm::Segment> view = shm::Segment::Attach(segment, shm::kSupervisor);
    REQUIRE(view.ok());
    std::atomic<uint64_t>& answered =
        view->frontend_counters(view->HookhostSlot(1)).models[0][0].answered[0];
    answered.fetch_add(5);
    int64_t pid = PidOf(*ready, "hookhost", 1);
    kill(static_cast<pid_t>(pid), SIGKILL);
    std::optional<json> back =
        ferryd.StatusWhen([&](const json& s) { return Restarted(s, "hookhost", 1, pid); });
    REQUIRE_MESSAGE(back, ferryd.log());
    CHECK(ChildOf(*back, "hookhost", 1)["last_exit"] == "killed by SIGKILL");
    CHECK(answered.load() >= 5);
  }
  SUBCASE("SIGSTOP of a worker: the heartbeat watchdog kills and restarts it") {
    int64_t pid = PidOf(*ready, "worker", 1);
    kill(static_cast<pid_t>(pid), SIGSTOP);
    std::optional<json> back =
        ferryd.StatusWhen([&](const json& s) { return Restarted(s, "worker", 1, pid); });
    REQUIRE_MESSAGE(back, ferryd.log());
    CHECK(ferryd.log().find("heartbeat stalled") != std::string::npos);
    CHECK(ProcessGone(static_cast<pid_t>(pid)));
  }
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
  CHECK_FALSE(ShmExists(segment));
}

TEST_CASE("SIGKILL of ferryd takes its children with it; the next start is not blocked") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  std::string segment = shm::Segment::NameForNode(ferryd.name());
  kill(ferryd.pid(), SIGKILL);
  ferryd.Wait();
  for (const json& c : (*ready)["children"]) {
    pid_t pid = static_cast<pid_t>(c["pid"].get<int64_t>());
    bool gone = false;
    for (int i = 0; i < 250 && !gone; ++i) {
      gone = ProcessGone(pid);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK_MESSAGE(gone, "child ", pid, " outlived ferryd");
  }
  CHECK(ShmExists(segment));  // Stale: nobody removed it.
  ferryd.Start();
  std::optional<json> again = ferryd.WaitReady();
  REQUIRE_MESSAGE(again, ferryd.log());
  CHECK(ferryd.log().find("removed the stale segment") != std::string::npos);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

// A listening socket on 127.0.0.1, port 0 (as systemd would create from a .socket unit).
std::pair<int, std::string> ListeningSocket() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(fd, 64) == 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return {fd, "127.0.0.1:" + std::to_string(ntohs(a.sin_port))};
}

TEST_CASE("systemd socket activation: the sockets passed by name are served") {
  TempDir dir;
  auto [http_fd, http_address] = ListeningSocket();
  auto [grpc_fd, grpc_address] = ListeningSocket();
  auto [metrics_fd, metrics_address] = ListeningSocket();
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  kill(ferryd.pid(), SIGKILL);  // Restarted below with the sockets.
  ferryd.Wait();
  ferryd.StartActivated({{"http", http_fd}, {"grpc", grpc_fd}, {"metrics", metrics_fd}});
  std::optional<json> ready = ferryd.WaitReady();
  REQUIRE_MESSAGE(ready, ferryd.log());
  CHECK((*ready)["listen"]["http"] == http_address);
  CHECK((*ready)["listen"]["grpc"] == grpc_address);
  CHECK((*ready)["listen"]["metrics"] == metrics_address);
  CHECK(ferryd.log().find("http socket from systemd socket activation") != std::string::npos);
  Result<net::HttpClient> client = net::HttpClient::Connect(http_address);
  REQUIRE(client.ok());
  Result<net::HttpAnswer> live = client->Request("GET", "/v2/health/live");
  REQUIRE(live.ok());
  CHECK(live->status == 200);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
  // A descriptor named for nothing ferryd serves: refused, nothing started.
  ferryd.StartActivated({{"https", http_fd}});
  CHECK(ferryd.Wait() == 1);
  CHECK(ferryd.log().find("named 'https'") != std::string::npos);
  close(http_fd);
  close(grpc_fd);
  close(metrics_fd);
}

TEST_CASE("a bad node file: exit 2 listing every error, nothing started") {
  TempDir dir;
  std::string name = UniqueNodeName();
  WriteFile(dir / "bad.toml", "[node]\nname = \"" + name +
                                  "\"\ndevices = \"cpu:0\"\nhookhosts = 0\n[scheduler]\n"
                                  "discipline = \"lifo\"\n");
  std::string out = dir / "out.txt";
  std::string command =
      std::string(FERRY_FERRYD_BINARY) + " --config " + (dir / "bad.toml") + " > " + out + " 2>&1";
  int status = std::system(command.c_str());
  CHECK(WEXITSTATUS(status) == 2);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text.find("node.devices") != std::string::npos);
  CHECK(text.find("node.hookhosts") != std::string::npos);
  CHECK(text.find("scheduler.discipline") != std::string::npos);
  CHECK_FALSE(ShmExists(shm::Segment::NameForNode(name)));
  // GPUs that are not there are refused before anything starts, too.
  WriteFile(dir / "gpu.toml", "[node]\nname = \"" + name + "\"\ndevices = [3]\n");
  command = std::string(FERRY_FERRYD_BINARY) + " --gpu-dir " + (dir / "nogpus") + " --config " +
            (dir / "gpu.toml") + " > " + out + " 2>&1";
  status = std::system(command.c_str());
  CHECK(WEXITSTATUS(status) == 2);
  CHECK_FALSE(ShmExists(shm::Segment::NameForNode(name)));
}

TEST_CASE("a GPU worker whose CUDA backend cannot start says why in the status") {
  // One GPU listed where ferryd looks, none usable here: the worker loads the CUDA module
  // (or finds it missing in a build without CUDA), cannot create the backend, and exits 1;
  // ferryd reports the worker's reason, naming the device, as its last exit.
  TempDir dir;
  std::filesystem::create_directories(dir / "gpus/0000:17:00.0");
  FerrydProcess ferryd(dir, "devices = [0]\nhookhosts = 1\n", kQuick, {"--gpu-dir", dir / "gpus"});
  std::optional<json> status = ferryd.StatusWhen([](const json& s) {
    json worker = ChildOf(s, "worker", 0);
    return worker.is_object() &&
           worker["last_exit"].get<std::string>().find("device 0") != std::string::npos;
  });
  REQUIRE_MESSAGE(status, ferryd.log());
  std::string last_exit = ChildOf(*status, "worker", 0)["last_exit"];
  MESSAGE(last_exit);
  CHECK(last_exit.rfind("exit 1: ", 0) == 0);
  bool names_cuda = last_exit.find("CUDA") != std::string::npos ||
                    last_exit.find("libferry_cuda.so") != std::string::npos;
  CHECK(names_cuda);
  // The hook host and ferryd keep running: the node is degraded, not gone.
  CHECK(ChildOf(*status, "hookhost", 0)["pid"].get<int>() > 0);
}

TEST_CASE("control: set_policy, reload (good and bad), and re-applying after a restart") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  auto weight_of = [&](int worker, const std::string& model) {
    Result<json> control = ferryd.Call(Command::kControlStatus);
    REQUIRE(control.ok());
    for (const json& w : (*control)["workers"]) {
      if (w["worker"] == worker) {
        for (const json& m : w["models"]) {
          if (m["model"] == model) {
            return m["weight"].get<double>();
          }
        }
      }
    }
    return -1.0;
  };
  auto eventually = [&](const std::function<bool()>& pred) {
    for (int i = 0; i < 500 && !pred(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
  };
  ControlRequest set;
  set.command = Command::kSetPolicy;
  set.model = "mlp";
  set.weight = 3.5;
  Result<json> reply = ferryd.Call(set);
  REQUIRE(reply.ok());
  CHECK((*reply)["workers"] == 2);
  CHECK(eventually([&] { return weight_of(0, "mlp") == 3.5 && weight_of(1, "mlp") == 3.5; }));

  set.model = "nosuch";
  reply = ferryd.Call(set);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().code == ErrorCode::kNotFound);

  ControlRequest residency;
  residency.command = Command::kSetResidency;
  residency.model = "mlp";
  reply = ferryd.Call(residency);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().message.find("residency_mode") != std::string::npos);

  // A restarted worker gets the live weight back, not the node file's.
  Result<json> status = ferryd.Status();
  REQUIRE(status.ok());
  int64_t pid = PidOf(*status, "worker", 0);
  kill(static_cast<pid_t>(pid), SIGKILL);
  REQUIRE(ferryd.StatusWhen([&](const json& s) { return Restarted(s, "worker", 0, pid); }));
  CHECK(eventually([&] { return weight_of(0, "mlp") == 3.5; }));

  // A good reload: weights, discipline, caps, queue depth and (managed mode) residency apply
  // live; what cannot is named.
  std::string text = ReadFileText(ferryd.config());
  WriteFile(ferryd.config(), text +
                                 "discipline = \"fifo\"\nmax_queue_depth = 64\n"
                                 "[scheduler.models.cnn]\nweight = 4.0\nmax_batch_size = 4\n"
                                 "residency = \"pinned\"\n[gateway]\nmode = \"round_robin\"\n"
                                 "[hooks]\nspin_us = 50\n");
  reply = ferryd.Call(Request(Command::kReload));
  REQUIRE(reply.ok());
  // discipline, queue depth, cnn's cap, weight and residency.
  CHECK((*reply)["applied"].size() == 5);
  CHECK((*reply)["applied"].dump().find("scheduler.models.cnn.residency = pinned") !=
        std::string::npos);
  REQUIRE((*reply)["restart_needed"].size() == 2);
  CHECK((*reply)["restart_needed"][0] == "gateway.mode");
  CHECK((*reply)["restart_needed"][1] == "hooks");
  CHECK(eventually([&] {
    Result<json> c = ferryd.Call(Command::kControlStatus);
    return c.ok() && (*c)["workers"][1]["models"][0]["model"] == "cnn" &&
           (*c)["workers"][1]["models"][0]["residency"] == "pinned";
  }));
  // ... and /metrics shows the floor in force.
  CHECK(eventually([&] {
    Result<net::HttpClient> client =
        net::HttpClient::Connect((*status)["listen"]["metrics"].get<std::string>());
    Result<net::HttpAnswer> metrics =
        client.ok() ? client->Request("GET", "/metrics") : Result<net::HttpAnswer>(client.error());
    return metrics.ok() &&
           metrics->body.find(
               "ferry_model_residency{gpu=\"1\",model=\"cnn\",residency=\"pinned\"} 1") !=
               std::string::npos;
  }));
  CHECK(eventually([&] { return weight_of(1, "cnn") == 4.0; }));
  CHECK(eventually([&] {
    Result<json> c = ferryd.Call(Command::kControlStatus);
    return c.ok() && (*c)["workers"][0]["models"][0]["model"] == "cnn" &&
           (*c)["workers"][0]["models"][0]["effective_max_batch"] == 4;
  }));
  Result<json> control = ferryd.Call(Command::kControlStatus);
  REQUIRE(control.ok());
  CHECK(eventually([&] {
    Result<json> c = ferryd.Call(Command::kControlStatus);
    return c.ok() && (*c)["workers"][0]["discipline"] == "fifo";
  }));

  // A bad reload: refused with the reason; the node keeps serving on its configuration.
  WriteFile(ferryd.config(), text + "[scheduler.models.cnn]\nweight = -1\n");
  reply = ferryd.Call(Request(Command::kReload));
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().message.find("keeps its configuration") != std::string::npos);
  CHECK(reply.error().message.find("weight") != std::string::npos);
  CHECK(weight_of(1, "cnn") == 4.0);
  status = ferryd.Status();
  REQUIRE(status.ok());
  CHECK((*status)["state"] == "ready");

  // SIGHUP reloads too (the same file, still bad: the log says so).
  kill(ferryd.pid(), SIGHUP);
  CHECK(eventually([&] {
    std::string log = ferryd.log();
    size_t first = log.find("reload refused");
    return first != std::string::npos && log.find("reload refused", first + 1) != std::string::npos;
  }));
  reply = ferryd.Call(Request(Command::kDrain));
  REQUIRE(reply.ok());
  CHECK(ferryd.Wait() == 0);
}

TEST_CASE("a child that keeps dying: backoff, then crash-looping and degraded, never given up") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode,
                       "restart_backoff_ms = 10\nrestart_backoff_max_ms = 100\n"
                       "crash_loop_restarts = 3\ncrash_loop_window_seconds = 60\n",
                       {"--worker-binary", "/bin/false"});
  std::optional<json> degraded = ferryd.StatusWhen([](const json& s) {
    return s["state"] == "degraded" && ChildOf(s, "worker", 0)["restarts"].get<int64_t>() > 5;
  });
  REQUIRE_MESSAGE(degraded, ferryd.log());
  CHECK(ChildOf(*degraded, "worker", 0)["crash_looping"] == true);
  CHECK(ChildOf(*degraded, "worker", 0)["last_exit"] == "exit 1");
  CHECK(ChildOf(*degraded, "hookhost", 0)["crash_looping"] == false);
  CHECK(ferryd.log().find("CRASH-LOOPING") != std::string::npos);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

// A raw client on the control socket.
int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

std::string ReadLine(int fd) {
  std::string line;
  char ch;
  while (recv(fd, &ch, 1, 0) == 1 && ch != '\n') {
    line += ch;
  }
  return line;
}

TEST_CASE("control socket: hostile clients get an error or are closed; ferryd keeps serving") {
  TempDir dir;
  FerrydProcess ferryd(dir, kSimNode, kQuick);
  REQUIRE_MESSAGE(ferryd.WaitReady(), ferryd.log());
  // Garbage, then a good request on the same connection: both answered, in order.
  int fd = Connect(ferryd.socket());
  std::string two = "this is not json\n{\"v\":1,\"cmd\":\"status\"}\n";
  REQUIRE(send(fd, two.data(), two.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(two.size()));
  Result<json> first = control::DecodeReply(ReadLine(fd));
  REQUIRE_FALSE(first.ok());
  CHECK(first.error().message.find("not JSON") != std::string::npos);
  Result<json> second = control::DecodeReply(ReadLine(fd));
  REQUIRE(second.ok());
  CHECK((*second)["node"] == ferryd.name());
  close(fd);

  // A line that never ends: refused at the limit and closed, memory bounded.
  fd = Connect(ferryd.socket());
  std::string chunk(1 << 16, 'x');
  for (int i = 0; i < 4; ++i) {
    if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) {
      break;  // Closed by ferryd already.
    }
  }
  Result<json> refused = control::DecodeReply(ReadLine(fd));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("longer than") != std::string::npos);
  char byte;
  CHECK(recv(fd, &byte, 1, 0) <= 0);  // Closed.
  close(fd);

  // Silent clients hold no more than their connection; many at once are refused politely.
  std::vector<int> idle;
  for (size_t i = 0; i < supervisor::kMaxClients; ++i) {
    idle.push_back(Connect(ferryd.socket()));
  }
  int extra = Connect(ferryd.socket());
  Result<json> busy = control::DecodeReply(ReadLine(extra));
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.error().code == ErrorCode::kResourceExhausted);
  close(extra);
  for (int f : idle) {
    close(f);
  }
  // Still serving.
  std::optional<json> after = ferryd.StatusWhen([](const json& s) { return s["ready"] == true; });
  CHECK(after);
  kill(ferryd.pid(), SIGTERM);
  CHECK(ferryd.Wait() == 0);
}

}  // namespace
}  // namespace ferry::testing
