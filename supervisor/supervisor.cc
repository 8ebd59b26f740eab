#include "supervisor/supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "model/bundle.h"
#include "model/repository.h"
#include "net/http_server.h"
#include "shm/control.h"
#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "shm/status.h"
#include "supervisor/child_process.h"
#include "supervisor/control_server.h"
#include "supervisor/devices.h"
#include "supervisor/listeners.h"
#include "supervisor/metrics.h"
#include "supervisor/node_report.h"
#include "supervisor/restart_policy.h"

namespace ferry::supervisor {
namespace {

using nlohmann::json;

constexpr int64_t kKillGraceNs = 5'000'000'000;
constexpr int64_t kStatusPeriodNs = 1'000'000'000;
constexpr uint32_t kRingCapacity = 1024;
constexpr uint64_t kSignalTag = uint64_t{1} << 40;
constexpr uint64_t kControlTag = uint64_t{2} << 40;

enum class Phase { kRunning, kDrainingHookhosts, kDrainingWorkers, kStopping, kDone };

struct Child {
  Child(bool is_worker, uint32_t i, uint32_t s, WorkerDevice d, const SupervisorSettings& settings)
      : worker(is_worker), index(i), slot(s), device(std::move(d)), policy(settings) {}

  bool worker = false;
  uint32_t index = 0;  // Among its kind.
  uint32_t slot = 0;
  WorkerDevice device;
  ChildProcess process;
  RestartPolicy policy;
  bool waiting = false;   // Dead, its successor due at restart_at.
  bool finished = false;  // Exited during shutdown: not restarted.
  int64_t started_ns = 0;
  int64_t restart_at = 0;
  uint64_t restarts = 0;
  std::string last_exit;
  std::string kill_reason;  // Why ferryd killed it, for the log line of its exit.
  uint64_t heartbeat = 0;
  int64_t heartbeat_ns = 0;
  std::optional<shm::StatusSnapshotData> status;  // Last consistent read.
  bool ready_seen = false;  // This incarnation reported ready (live overrides re-applied).
  // A hook host drained to pick up a new model table: restarted at once when it exits, not
  // counted as a death.
  bool refreshing = false;
  int64_t refresh_since = 0;

  std::string Name() const {
    return (worker ? "worker " : "hook host ") + std::to_string(index) + " (slot " +
           std::to_string(slot) + ")";
  }
  bool running() const { return process.pid > 0; }
  shm::ProcessState state() const {
    return status ? static_cast<shm::ProcessState>(status->state) : shm::ProcessState::kStarting;
  }
  bool ready() const { return running() && state() == shm::ProcessState::kReady; }
};

std::string_view PhaseName(Phase p) {
  switch (p) {
    case Phase::kRunning:
      return "running";
    case Phase::kDrainingHookhosts:
      return "draining hook hosts";
    case Phase::kDrainingWorkers:
      return "draining workers";
    case Phase::kStopping:
      return "stopping";
    case Phase::kDone:
      return "stopped";
  }
  return "?";
}

// The node-file changes a reload cannot apply to running processes.
std::vector<std::string> RestartNeeded(const NodeConfig& a, const NodeConfig& b) {
  std::vector<std::string> out;
  const NodeSettings& x = a.node;
  const NodeSettings& y = b.node;
  auto check = [&](bool same, const char* key) {
    if (!same) {
      out.push_back(key);
    }
  };
  check(x.name == y.name, "node.name");
  check(x.devices.kind == y.devices.kind && x.devices.gpu_ids == y.devices.gpu_ids &&
            x.devices.cpu_workers == y.devices.cpu_workers,
        "node.devices");
  check(x.backend == y.backend, "node.backend");
  check(x.hookhosts == y.hookhosts, "node.hookhosts");
  check(x.http.ToString() == y.http.ToString() && x.grpc.ToString() == y.grpc.ToString() &&
            x.metrics.ToString() == y.metrics.ToString(),
        "node.listen");
  check(x.model_repository == y.model_repository, "node.model_repository");
  check(x.shm_size == y.shm_size, "node.shm_size");
  check(a.supervisor.control_socket == b.supervisor.control_socket &&
            a.supervisor.control_group == b.supervisor.control_group,
        "supervisor.control_socket/control_group");
  check(a.gateway.mode == b.gateway.mode, "gateway.mode");
  check(a.frontend.max_request_bytes == b.frontend.max_request_bytes &&
            a.frontend.max_connections == b.frontend.max_connections &&
            a.frontend.request_timeout_seconds == b.frontend.request_timeout_seconds &&
            a.frontend.idle_timeout_seconds == b.frontend.idle_timeout_seconds &&
            a.frontend.tenants == b.frontend.tenants,
        "frontend");
  check(a.hooks.sandbox == b.hooks.sandbox && a.hooks.threads == b.hooks.threads &&
            a.hooks.call_timeout_ms == b.hooks.call_timeout_ms &&
            a.hooks.max_pending == b.hooks.max_pending && a.hooks.spin_us == b.hooks.spin_us,
        "hooks");
  check(a.cpu.threads == b.cpu.threads && a.cpu.pin == b.cpu.pin, "cpu");
  const SchedulerConfig& s = a.scheduler;
  const SchedulerConfig& t = b.scheduler;
  check(s.ema_halflife_seconds == t.ema_halflife_seconds &&
            s.recency_penalty_cap == t.recency_penalty_cap &&
            s.coalescing_discount == t.coalescing_discount &&
            s.cost_ema_alpha == t.cost_ema_alpha &&
            s.dispatch_timeout_seconds == t.dispatch_timeout_seconds &&
            s.compaction_interval == t.compaction_interval &&
            s.residency_mode == t.residency_mode && s.batch_sizing == t.batch_sizing,
        "scheduler (keys other than discipline, max_queue_depth and models' weight and "
        "max_batch_size)");
  std::vector<std::string> models;
  for (const auto& [name, m] : s.models) {
    models.push_back(name);
  }
  for (const auto& [name, m] : t.models) {
    models.push_back(name);
  }
  for (const std::string& name : models) {
    auto p = s.models.find(name);
    auto q = t.models.find(name);
    ModelSchedulingConfig none;
    const ModelSchedulingConfig& m = p == s.models.end() ? none : p->second;
    const ModelSchedulingConfig& n = q == t.models.end() ? none : q->second;
    // Managed mode applies a new floor live (Reload); external mode's controller owns it.
    if (m.residency != n.residency && s.residency_mode == ResidencyMode::kExternal) {
      out.push_back("scheduler.models." + name + ".residency");
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double WeightOf(const SchedulerConfig& config, const std::string& model) {
  auto it = config.models.find(model);
  return it == config.models.end() ? 1.0 : it->second.weight;
}

// Descriptors passed by systemd socket activation, by name (FileDescriptorName=): http, grpc,
// metrics. The variables are removed, so no child sees them. INVALID_ARGUMENT for a
// descriptor with another name (a unit that does not match this ferryd).
Result<std::map<std::string, int>> ActivatedSockets() {
  char** names = nullptr;
  int n = sd_listen_fds_with_names(1, &names);
  std::map<std::string, int> out;
  std::optional<Error> error;
  for (int i = 0; i < n; ++i) {
    std::string name = names != nullptr && names[i] != nullptr ? names[i] : "";
    if (name != "http" && name != "grpc" && name != "metrics") {
      error = InvalidArgument("socket activation passed a descriptor named '" + name +
                              "'; name them http, grpc or metrics (FileDescriptorName=)");
    }
    out[name] = SD_LISTEN_FDS_START + i;
  }
  if (names != nullptr) {
    for (int i = 0; i < n; ++i) {
      free(names[i]);
    }
    free(names);
  }
  if (error) {
    return *error;
  }
  return out;
}

Residency ResidencyOf(const SchedulerConfig& config, const std::string& model) {
  return config.ForModel(model).residency;
}

std::optional<int64_t> CapOf(const SchedulerConfig& config, const std::string& model) {
  auto it = config.models.find(model);
  return it == config.models.end() ? std::nullopt : it->second.max_batch_size;
}

}  // namespace

struct Supervisor::Impl {
  SupervisorOptions options;
  NodeConfig config;
  std::vector<WorkerDevice> devices;
  std::optional<shm::Segment> segment;
  std::optional<ControlServer> control;
  std::optional<Listener> http;  // Handed to every hook host; closed when the node stops.
  std::string bound_http;
  std::optional<Listener> grpc;  // Likewise, for gRPC.
  std::string bound_grpc;
  // /metrics: its own thread, reading only shared memory and `counters`.
  std::optional<Listener> metrics_listener;
  std::unique_ptr<SupervisorCounters> counters;
  std::unique_ptr<net::HttpServer> metrics_server;
  std::thread metrics_thread;
  std::vector<Child> children;
  int epoll_fd = -1;
  int signal_fd = -1;
  Phase phase = Phase::kRunning;
  int64_t drain_deadline = 0;
  int64_t kill_deadline = 0;
  bool notified_ready = false;
  std::string last_status_line;
  int64_t last_status_ns = 0;
  uint64_t watchdog_usec = 0;
  int64_t last_watchdog_ns = 0;
  uint64_t control_sequence = 1;
  // Live changes made since start, re-applied to a worker that restarts.
  std::optional<Discipline> discipline_override;
  std::map<std::string, double> weight_overrides;
  std::map<std::string, std::optional<int64_t>> batch_overrides;  // nullopt: uncapped.
  std::optional<int64_t> queue_depth_override;
  // The node's model table, by index: a model name, or "-" for an unloaded one. Children get
  // it at every start (--models); workers follow loads and unloads live, hook hosts (which
  // cannot open bundles inside their sandbox) are restarted one at a time.
  std::vector<std::string> model_table;
  std::deque<size_t> refresh_queue;       // Hook hosts (child indices) due for a restart.
  std::optional<size_t> refresh_current;  // The one restarting now.

  ~Impl() {
    StopMetrics();
    if (signal_fd >= 0) {
      close(signal_fd);
    }
    if (epoll_fd >= 0) {
      close(epoll_fd);
    }
  }

  Status Start();
  Status StartMetrics();
  void StopMetrics();
  void Loop();
  void StartChild(Child& c, int64_t now);
  void OnExit(Child& c, int64_t now);
  void Tick(int64_t now);
  void Watch(Child& c, int64_t now);
  void Kill(Child& c, const std::string& why);
  bool SendControl(const Child& c, const shm::ControlMessage& message);
  void ReapplyOverrides(const Child& c);
  void BeginShutdown(const std::string& why, int64_t now);
  void AdvanceShutdown(int64_t now);
  void Notify(int64_t now);
  bool NodeReady() const;
  bool Degraded(int64_t now) const;
  Result<json> Handle(const control::ControlRequest& request);
  Result<json> Reload();
  Result<json> SendToModel(const std::string& model, shm::ControlCode code, double weight,
                           int32_t value);
  Result<json> LoadModel(const std::string& name);
  Result<json> UnloadModel(const std::string& name);
  // Sends a model table change to every running worker; one whose control ring is full is
  // killed (its successor starts with the new table) rather than left numbering differently.
  size_t SendTableChange(const shm::ControlMessage& message);
  void QueueHookhostRefresh();
  void RefreshHookhosts(int64_t now);
  // How long the loop may sleep: kTickNs, or up to kRestTickNs while the node is settled.
  int64_t TickNs() const;
  json StatusJson() const;
};

Result<std::unique_ptr<Supervisor>> Supervisor::Create(SupervisorOptions options,
                                                       NodeConfig config) {
  FERRY_ASSIGN_OR_RETURN(std::vector<WorkerDevice> devices,
                         ResolveDevices(config.node, options.gpu_dir));
  for (const std::string* binary : {&options.worker_binary, &options.hookhost_binary}) {
    if (access(binary->c_str(), X_OK) != 0) {
      return NotFound("cannot execute " + *binary + ": " + std::strerror(errno));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->config = std::move(config);
  impl->devices = std::move(devices);
  return std::unique_ptr<Supervisor>(new Supervisor(std::move(impl)));
}

Supervisor::Supervisor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Supervisor::~Supervisor() = default;

int Supervisor::Run() {
  if (Status started = impl_->Start(); !started.ok()) {
    spdlog::error("cannot start the node: {}", started.error().ToString());
    for (Child& c : impl_->children) {
      if (c.running()) {
        Signal(c.process, SIGKILL);
        Reap(&c.process, true);
      }
    }
    if (impl_->segment) {
      shm::Segment::Remove(impl_->segment->name());
    }
    return 1;
  }
  impl_->Loop();
  impl_->StopMetrics();
  shm::Segment::Remove(impl_->segment->name());
  spdlog::info("node '{}' stopped; segment {} removed", impl_->config.node.name,
               impl_->segment->name());
  return 0;
}

Status Supervisor::Impl::Start() {
  // Signals arrive through a descriptor, so the loop handles them between its steps.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) {
    sigaddset(&mask, s);
  }
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (signal_fd < 0 || epoll_fd < 0) {
    return Internal(std::string("signalfd/epoll: ") + std::strerror(errno));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kSignalTag;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, signal_fd, &event);

  std::string name = shm::Segment::NameForNode(config.node.name);
  if (shm::Segment::Remove(name)) {
    spdlog::warn("removed the stale segment {} of a predecessor that did not stop cleanly", name);
  }
  shm::SegmentLayout layout{static_cast<uint32_t>(config.node.hookhosts),
                            static_cast<uint32_t>(devices.size()), kRingCapacity,
                            config.node.shm_size};
  FERRY_ASSIGN_OR_RETURN(model_table, ListRepository(config.node.model_repository));
  FERRY_ASSIGN_OR_RETURN(shm::Segment created, shm::Segment::Create(name, layout));
  segment.emplace(std::move(created));

  // Sockets passed by systemd (ferry-http.socket, ...) are taken by name; the others are
  // created from [node.listen].
  FERRY_ASSIGN_OR_RETURN(auto activated, ActivatedSockets());
  auto listener = [&](const char* name, const ListenAddress& address) -> Result<Listener> {
    auto it = activated.find(name);
    return it == activated.end() ? Listener::Open(address) : Listener::Adopt(it->second);
  };
  FERRY_ASSIGN_OR_RETURN(Listener http_listener, listener("http", config.node.http));
  http.emplace(std::move(http_listener));
  FERRY_ASSIGN_OR_RETURN(Listener grpc_listener, listener("grpc", config.node.grpc));
  grpc.emplace(std::move(grpc_listener));
  FERRY_ASSIGN_OR_RETURN(Listener metrics_socket, listener("metrics", config.node.metrics));
  metrics_listener.emplace(std::move(metrics_socket));
  for (const auto& [name, fd] : activated) {
    spdlog::info("{} socket from systemd socket activation (descriptor {})", name, fd);
  }
  FERRY_RETURN_IF_ERROR(StartMetrics());

  FERRY_ASSIGN_OR_RETURN(
      ControlServer server,
      ControlServer::Open(config.supervisor.control_socket, config.supervisor.control_group,
                          [this](const control::ControlRequest& r) { return Handle(r); }));
  control.emplace(std::move(server));
  event.data.u64 = kControlTag;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, control->fd(), &event);

  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) {
    watchdog_usec = usec;
  }
  int64_t now = MonotonicNs();
  for (uint32_t h = 0; h < segment->hookhosts(); ++h) {
    children.emplace_back(false, h, segment->HookhostSlot(h), WorkerDevice{}, config.supervisor);
  }
  for (uint32_t w = 0; w < segment->workers(); ++w) {
    children.emplace_back(true, w, segment->WorkerSlot(w), devices[w], config.supervisor);
  }
  spdlog::info(
      "node '{}': segment {} ({} bytes), {} hook host(s), {} worker(s), HTTP on {}, gRPC on {}, "
      "metrics on {}, control socket {}",
      config.node.name, name, config.node.shm_size, segment->hookhosts(), segment->workers(),
      http->bound(), grpc->bound(), metrics_listener->bound(), control->path());
  for (Child& c : children) {
    StartChild(c, now);
    if (!c.running()) {
      return Internal("could not start " + c.Name() + ": " + c.last_exit);
    }
  }
  return OkStatus();
}

Status Supervisor::Impl::StartMetrics() {
  counters = std::make_unique<SupervisorCounters>(segment->num_slots(), config.frontend.tenants);
  net::HttpServerOptions options;
  options.max_body_bytes = 1024;
  options.max_connections = 64;
  options.request_timeout_ns = 5'000'000'000;
  const shm::Segment* view = &*segment;
  const SupervisorCounters* c = counters.get();
  metrics_server = std::make_unique<net::HttpServer>(
      metrics_listener->fd(), options,
      [view, c](net::HttpRequest&& request, net::Responder respond) {
        net::HttpResponse r;
        std::string_view path =
            std::string_view(request.target).substr(0, request.target.find('?'));
        if (path != "/metrics") {
          r.status = 404;
          r.body = "{\"error\":\"only /metrics is served here\"}";
        } else if (request.method != "GET") {
          r.status = 405;
        } else {
          r.headers.emplace_back("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
          r.body = RenderMetrics(*view, *c);
        }
        respond(std::move(r));
      });
  metrics_thread = std::thread([this] { metrics_server->Run(); });
  return OkStatus();
}

void Supervisor::Impl::StopMetrics() {
  if (metrics_server != nullptr) {
    metrics_server->Stop();
    metrics_thread.join();
    metrics_server.reset();
  }
}

void Supervisor::Impl::StartChild(Child& c, int64_t now) {
  ChildSpec spec;
  spec.binary = c.worker ? options.worker_binary : options.hookhost_binary;
  spec.args = {"--segment", segment->name(),    "--slot", std::to_string(c.slot),
               "--config",  options.config_path};
  spec.args.insert(spec.args.end(), options.child_log_args.begin(), options.child_log_args.end());
  std::string table;
  for (const std::string& entry : model_table) {
    table += (table.empty() ? "" : ",") + entry;
  }
  spec.args.insert(spec.args.end(), {"--models", table});
  if (!c.worker) {
    // Only while running: nothing is restarted once stopping.
    spec.fds = {http->fd(), grpc->fd()};
    spec.args.insert(spec.args.end(), {"--http-fd", "3", "--grpc-fd", "4"});
  }
  if (c.worker) {
    spec.env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    // A CPU worker sees no GPU; a GPU worker only its own.
    spec.env.emplace_back("CUDA_VISIBLE_DEVICES",
                          c.device.gpu ? std::to_string(c.device.gpu_id) : "");
    if (c.device.gpu) {
      spec.args.push_back("--device-pinned");
    }
  }
  Result<ChildProcess> started = Spawn(spec);
  if (!started.ok()) {
    c.last_exit = started.error().ToString();
    spdlog::error("{}: {}", c.Name(), c.last_exit);
    c.waiting = true;
    c.restart_at = now + c.policy.OnDeath(now, now);
    return;
  }
  c.process = *started;
  c.waiting = false;
  c.started_ns = now;
  c.heartbeat = shm::ReadHeartbeat(*segment, c.slot);
  c.heartbeat_ns = now;
  c.status.reset();
  c.ready_seen = false;
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = static_cast<uint64_t>(&c - children.data());
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.process.pidfd, &event);
  spdlog::info("{} started: pid {}{}", c.Name(), c.process.pid,
               c.worker ? " on " + c.device.Describe() : "");
}

void Supervisor::Impl::OnExit(Child& c, int64_t now) {
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.process.pidfd, nullptr);
  pid_t pid = c.process.pid;
  int status = Reap(&c.process);
  c.last_exit = DescribeWaitStatus(status);
  if (std::string why = shm::ReadStartError(*segment, c.slot); !why.empty()) {
    c.last_exit += ": " + why;
  }
  // Whatever it left in shared memory is repaired before anyone can start in its place; its
  // peers see the new generation and fail what they had in flight with it (UNAVAILABLE).
  uint32_t generation = shm::ResetSlot(*segment, c.slot);
  bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (phase != Phase::kRunning) {
    c.finished = true;
    spdlog::info("{} (pid {}) exited: {}", c.Name(), pid, c.last_exit);
    return;
  }
  if (c.refreshing) {
    c.refreshing = false;
    c.kill_reason.clear();
    c.waiting = true;
    c.restart_at = now;
    spdlog::info("{} (pid {}) drained for the new model table ({}); restarting it", c.Name(), pid,
                 c.last_exit);
    return;
  }
  int64_t delay = c.policy.OnDeath(c.started_ns, now);
  c.waiting = true;
  c.restart_at = now + delay;
  ++c.restarts;
  counters->restarts[c.slot].store(c.restarts);
  std::string why = c.kill_reason.empty() ? "" : " (" + c.kill_reason + ")";
  c.kill_reason.clear();
  auto level = clean ? spdlog::level::warn : spdlog::level::err;
  spdlog::log(level, "{} (pid {}) died: {}{}; slot reset to generation {}, restart in {} ms{}",
              c.Name(), pid, c.last_exit, why, generation, delay / 1'000'000,
              c.policy.CrashLooping(now) ? "; CRASH-LOOPING, node degraded" : "");
}

void Supervisor::Impl::Kill(Child& c, const std::string& why) {
  if (c.kill_reason.empty()) {
    spdlog::error("{} (pid {}): {}; killing it", c.Name(), c.process.pid, why);
    c.kill_reason = why;
  }
  Signal(c.process, SIGKILL);
}

bool Supervisor::Impl::SendControl(const Child& c, const shm::ControlMessage& message) {
  shm::RingProducer ring(*segment, segment->ControlRing(c.slot));
  return ring.TryPush(shm::EncodeControl(message, control_sequence++)) == shm::RingStatus::kOk;
}

void Supervisor::Impl::ReapplyOverrides(const Child& c) {
  if (!c.worker || !c.status) {
    return;
  }
  if (discipline_override) {
    SendControl(
        c, {shm::ControlCode::kSetDiscipline, 0, 0, static_cast<int32_t>(*discipline_override)});
  }
  if (queue_depth_override) {
    SendControl(c, {shm::ControlCode::kSetMaxQueueDepth, 0, 0,
                    static_cast<int32_t>(*queue_depth_override)});
  }
  for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
    std::string name(c.status->models[m].name,
                     strnlen(c.status->models[m].name, sizeof(c.status->models[m].name)));
    auto it = weight_overrides.find(name);
    if (it != weight_overrides.end()) {
      SendControl(c, {shm::ControlCode::kSetPolicy, m, it->second, 0});
    }
    auto cap = batch_overrides.find(name);
    if (cap != batch_overrides.end()) {
      SendControl(c, {shm::ControlCode::kSetMaxBatchSize, m, 0,
                      static_cast<int32_t>(cap->second.value_or(0))});
    }
  }
}

void Supervisor::Impl::Watch(Child& c, int64_t now) {
  uint64_t beat = shm::ReadHeartbeat(*segment, c.slot);
  if (beat != c.heartbeat) {
    c.heartbeat = beat;
    c.heartbeat_ns = now;
  }
  Result<shm::StatusSnapshotData> read = shm::ReadStatus(*segment, c.slot, 16);
  if (read.ok() && read->generation == segment->generation(c.slot).load()) {
    c.status = *read;
  }
  shm::ProcessState state = c.state();
  if (state == shm::ProcessState::kReady && !c.ready_seen) {
    c.ready_seen = true;
    c.heartbeat_ns = now;
    spdlog::info("{} ready after {} ms", c.Name(), (now - c.started_ns) / 1'000'000);
    ReapplyOverrides(c);
  }
  if (!c.kill_reason.empty()) {
    return;  // Already killed; its exit is on its way.
  }
  int64_t stall_limit = static_cast<int64_t>(config.scheduler.dispatch_timeout_seconds * 1e9);
  if (state == shm::ProcessState::kStarting) {
    int64_t start_limit = static_cast<int64_t>(config.supervisor.start_timeout_seconds * 1e9);
    if (now - c.started_ns > start_limit) {
      Kill(c, "not ready " + std::to_string(start_limit / 1'000'000'000) + " s after its start");
    }
  } else if (state == shm::ProcessState::kUnhealthy) {
    Kill(c, "it reports itself unhealthy");
  } else if (phase == Phase::kRunning && state == shm::ProcessState::kReady &&
             now - c.heartbeat_ns > stall_limit) {
    // Only while serving: a draining or stopped process exits without beating, and the
    // drain timeout bounds it.
    Kill(c, "heartbeat stalled for " + std::to_string((now - c.heartbeat_ns) / 1'000'000) +
                " ms (scheduler.dispatch_timeout_seconds; a hung device?)");
  }
}

bool Supervisor::Impl::NodeReady() const {
  return std::all_of(children.begin(), children.end(), [](const Child& c) { return c.ready(); });
}

bool Supervisor::Impl::Degraded(int64_t now) const {
  return std::any_of(children.begin(), children.end(),
                     [&](const Child& c) { return c.policy.CrashLooping(now); });
}

void Supervisor::Impl::Notify(int64_t now) {
  size_t workers_ready = 0;
  size_t hookhosts_ready = 0;
  uint64_t queued = 0;
  for (const Child& c : children) {
    if (c.ready()) {
      ++(c.worker ? workers_ready : hookhosts_ready);
    }
    if (c.worker && c.running() && c.status) {
      for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
        queued += c.status->models[m].queue_depth;
      }
    }
  }
  bool ready = NodeReady();
  for (const Child& c : children) {
    counters->up[c.slot].store(c.ready());
  }
  counters->ready.store(ready && phase == Phase::kRunning);
  if (ready && !notified_ready && phase == Phase::kRunning) {
    notified_ready = true;
    sd_notify(0, "READY=1");
    spdlog::info("node '{}' ready", config.node.name);
  }
  std::string line = std::string(phase != Phase::kRunning ? PhaseName(phase)
                                 : Degraded(now)          ? "degraded"
                                 : ready                  ? "ready"
                                                          : "starting") +
                     ": " + std::to_string(workers_ready) + "/" + std::to_string(devices.size()) +
                     " workers, " + std::to_string(hookhosts_ready) + "/" +
                     std::to_string(config.node.hookhosts) + " hook hosts ready, " +
                     std::to_string(queued) + " queued";
  if (line != last_status_line && now - last_status_ns >= kStatusPeriodNs / 10) {
    sd_notify(0, ("STATUS=" + line).c_str());
    last_status_line = line;
    last_status_ns = now;
  }
  if (watchdog_usec > 0 && now - last_watchdog_ns >= static_cast<int64_t>(watchdog_usec) * 500) {
    int64_t stall_limit = static_cast<int64_t>(config.scheduler.dispatch_timeout_seconds * 1e9);
    bool beating = std::all_of(children.begin(), children.end(), [&](const Child& c) {
      return !c.running() || !c.ready_seen || now - c.heartbeat_ns <= stall_limit;
    });
    if (beating) {
      sd_notify(0, "WATCHDOG=1");
      last_watchdog_ns = now;
    }
  }
}

void Supervisor::Impl::BeginShutdown(const std::string& why, int64_t now) {
  if (phase != Phase::kRunning) {
    return;
  }
  spdlog::info("stopping the node ({}): hook hosts drain first, then workers; drain timeout {} s",
               why, config.supervisor.drain_timeout_seconds);
  sd_notify(0, "STOPPING=1");
  // ferryd's copy of the listening socket goes first: once the hook hosts stop accepting, no
  // connection can wait in a backlog nobody serves (clients get a refusal, not a hang).
  bound_http = http->bound();
  http.reset();
  bound_grpc = grpc->bound();
  grpc.reset();
  phase = Phase::kDrainingHookhosts;
  drain_deadline = now + static_cast<int64_t>(config.supervisor.drain_timeout_seconds * 1e9);
  for (Child& c : children) {
    if (!c.running()) {
      c.finished = true;  // Waiting for a restart: none now.
      c.waiting = false;
    } else if (!c.worker) {
      SendControl(c, {shm::ControlCode::kDrain, 0, 0, 0});
    }
  }
}

void Supervisor::Impl::AdvanceShutdown(int64_t now) {
  auto all_done = [&](bool workers) {
    return std::all_of(children.begin(), children.end(),
                       [&](const Child& c) { return c.worker != workers || !c.running(); });
  };
  if (phase == Phase::kDrainingHookhosts && (all_done(false) || now >= drain_deadline)) {
    phase = Phase::kDrainingWorkers;
    for (Child& c : children) {
      if (c.worker && c.running()) {
        SendControl(c, {shm::ControlCode::kDrain, 0, 0, 0});
      }
    }
  }
  if (phase == Phase::kDrainingWorkers && (all_done(true) && all_done(false))) {
    phase = Phase::kDone;
  }
  if (phase == Phase::kDrainingWorkers && now >= drain_deadline) {
    spdlog::warn("drain timeout: stopping what is left (its queued requests fail UNAVAILABLE)");
    phase = Phase::kStopping;
    kill_deadline = now + kKillGraceNs;
    for (Child& c : children) {
      if (c.running()) {
        SendControl(c, {shm::ControlCode::kStop, 0, 0, 0});
      }
    }
  }
  if (phase == Phase::kStopping) {
    if (all_done(true) && all_done(false)) {
      phase = Phase::kDone;
    } else if (now >= kill_deadline) {
      for (Child& c : children) {
        if (c.running()) {
          Kill(c,
               "still running " + std::to_string(kKillGraceNs / 1'000'000'000) + " s after stop");
        }
      }
    }
  }
}

void Supervisor::Impl::Tick(int64_t now) {
  for (Child& c : children) {
    if (c.running()) {
      Watch(c, now);
    } else if (c.waiting && !c.finished && phase == Phase::kRunning && now >= c.restart_at) {
      StartChild(c, now);
    }
  }
  RefreshHookhosts(now);
  if (phase != Phase::kRunning) {
    AdvanceShutdown(now);
  }
  Notify(now);
}

int64_t Supervisor::Impl::TickNs() const {
  bool settled = phase == Phase::kRunning && control->clients() == 0 && refresh_queue.empty() &&
                 !refresh_current &&
                 std::all_of(children.begin(), children.end(),
                             [](const Child& c) { return c.ready() && c.kill_reason.empty(); });
  if (!settled) {
    return kTickNs;
  }
  // Every child ready and nothing in progress: only heartbeats to watch. The tick stays well
  // inside the stall limit and the systemd watchdog's half period.
  auto stall_limit = static_cast<int64_t>(config.scheduler.dispatch_timeout_seconds * 1e9);
  int64_t tick = std::min(kRestTickNs, stall_limit / 10);
  if (watchdog_usec > 0) {
    tick = std::min(tick, static_cast<int64_t>(watchdog_usec) * 250);
  }
  return std::max(tick, kTickNs);
}

void Supervisor::Impl::Loop() {
  while (phase != Phase::kDone) {
    epoll_event events[16];
    int n = epoll_wait(epoll_fd, events, 16, static_cast<int>(TickNs() / 1'000'000));
    int64_t now = MonotonicNs();
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kSignalTag) {
        signalfd_siginfo info{};
        while (read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
          if (info.ssi_signo == SIGHUP) {
            spdlog::info("SIGHUP: reloading {}", options.config_path);
            (void)Reload();
          } else {
            BeginShutdown(std::string("SIG") + sigabbrev_np(static_cast<int>(info.ssi_signo)), now);
          }
        }
      } else if (tag == kControlTag) {
        control->Poll(now);
      } else if (tag < children.size() && children[tag].running()) {
        OnExit(children[tag], now);
      }
    }
    control->Poll(now);  // Idle clients time out even when nothing arrives.
    Tick(now);
  }
}

Result<json> Supervisor::Impl::SendToModel(const std::string& model, shm::ControlCode code,
                                           double weight, int32_t value) {
  size_t sent = 0;
  size_t found = 0;
  for (const Child& c : children) {
    if (!c.worker || !c.running() || !c.status) {
      continue;
    }
    for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
      if (model ==
          std::string_view(c.status->models[m].name,
                           strnlen(c.status->models[m].name, sizeof(c.status->models[m].name)))) {
        ++found;
        sent += SendControl(c, {code, m, weight, value}) ? 1 : 0;
      }
    }
  }
  if (found == 0) {
    return NotFound("no running worker serves a model named '" + model + "'");
  }
  if (sent < found) {
    return Unavailable("the control ring of " + std::to_string(found - sent) +
                       " worker(s) is full; retry");
  }
  return json{{"workers", sent}};
}

size_t Supervisor::Impl::SendTableChange(const shm::ControlMessage& message) {
  size_t sent = 0;
  for (Child& c : children) {
    if (!c.worker || !c.running()) {
      continue;  // A worker (re)starting now gets the new table on its command line.
    }
    if (SendControl(c, message)) {
      ++sent;
    } else {
      Kill(c, "its control ring was full during a model table change");
    }
  }
  return sent;
}

void Supervisor::Impl::QueueHookhostRefresh() {
  for (size_t i = 0; i < children.size(); ++i) {
    if (!children[i].worker &&
        std::find(refresh_queue.begin(), refresh_queue.end(), i) == refresh_queue.end()) {
      refresh_queue.push_back(i);
    }
  }
}

void Supervisor::Impl::RefreshHookhosts(int64_t now) {
  if (phase != Phase::kRunning) {
    refresh_queue.clear();
    refresh_current.reset();
    return;
  }
  if (refresh_current) {
    Child& c = children[*refresh_current];
    int64_t limit = static_cast<int64_t>(config.supervisor.drain_timeout_seconds * 1e9);
    if (c.refreshing && c.running() && now - c.refresh_since > limit && c.kill_reason.empty()) {
      Kill(c, "not drained " + std::to_string(limit / 1'000'000'000) +
                  " s after a model table change");
    }
    if (c.refreshing || !c.ready()) {
      return;  // Still draining, or its successor not ready yet: one at a time.
    }
    refresh_current.reset();
  }
  while (!refresh_queue.empty()) {
    size_t next = refresh_queue.front();
    refresh_queue.pop_front();
    Child& c = children[next];
    if (!c.running()) {
      continue;  // It starts with the new table anyway.
    }
    if (SendControl(c, {shm::ControlCode::kDrain, 0, 0, 0})) {
      c.refreshing = true;
      c.refresh_since = now;
    } else {
      Kill(c, "its control ring was full during a model table change");
    }
    refresh_current = next;
    return;
  }
}

Result<json> Supervisor::Impl::LoadModel(const std::string& name) {
  if (phase != Phase::kRunning) {
    return Unavailable("the node is stopping");
  }
  auto found = std::find(model_table.begin(), model_table.end(), name);
  if (found != model_table.end()) {
    return InvalidArgument("model '" + name + "' is already loaded (index " +
                           std::to_string(found - model_table.begin()) + ")");
  }
  if (model_table.size() >= kMaxRepositoryModels) {
    return ResourceExhausted("the model table is full (" + std::to_string(kMaxRepositoryModels) +
                             " indices, unloaded ones included); restart the node to renumber");
  }
  // Checked here, so a bundle that cannot load is refused before any process sees it.
  Result<Bundle> bundle = LoadBundle(config.node.model_repository + "/" + name);
  if (!bundle.ok()) {
    return Error{bundle.error().code, "load '" + name + "': " + bundle.error().message};
  }
  auto index = static_cast<uint32_t>(model_table.size());
  model_table.push_back(name);
  shm::ControlMessage message{shm::ControlCode::kLoadModel, index, 0, 0};
  message.name = name;
  size_t workers = SendTableChange(message);
  QueueHookhostRefresh();
  spdlog::info(
      "load: model '{}' as index {}; {} worker(s) loading it, hook hosts restarting one "
      "at a time",
      name, index, workers);
  return json{{"model", name}, {"index", index}, {"workers", workers}};
}

Result<json> Supervisor::Impl::UnloadModel(const std::string& name) {
  if (phase != Phase::kRunning) {
    return Unavailable("the node is stopping");
  }
  auto found = std::find(model_table.begin(), model_table.end(), name);
  if (found == model_table.end()) {
    return NotFound("no model '" + name + "' is loaded");
  }
  auto index = static_cast<uint32_t>(found - model_table.begin());
  *found = "-";
  size_t workers = SendTableChange({shm::ControlCode::kUnloadModel, index, 0, 0});
  weight_overrides.erase(name);
  batch_overrides.erase(name);
  QueueHookhostRefresh();
  spdlog::info("unload: model '{}' (index {}); its queued requests still run", name, index);
  return json{{"model", name}, {"index", index}, {"workers", workers}};
}

Result<json> Supervisor::Impl::Reload() {
  sd_notify(0, "RELOADING=1");
  Result<NodeConfig> loaded = LoadNodeConfig(options.config_path, SchedulerEnvironment());
  if (!loaded.ok()) {
    spdlog::error("reload refused; the node keeps its configuration:\n{}", loaded.error().message);
    sd_notify(0, "READY=1");
    return InvalidArgument("reload refused, the node keeps its configuration: " +
                           loaded.error().message);
  }
  std::vector<std::string> restart = RestartNeeded(config, *loaded);
  json applied = json::array();
  if (loaded->scheduler.discipline != config.scheduler.discipline) {
    discipline_override = loaded->scheduler.discipline;
    for (const Child& c : children) {
      if (c.worker && c.running()) {
        SendControl(c, {shm::ControlCode::kSetDiscipline, 0, 0,
                        static_cast<int32_t>(loaded->scheduler.discipline)});
      }
    }
    applied.push_back("scheduler.discipline = " +
                      std::string(DisciplineName(loaded->scheduler.discipline)));
  }
  std::map<std::string, bool> names;
  for (const auto& [name, m] : config.scheduler.models) {
    names[name] = true;
  }
  for (const auto& [name, m] : loaded->scheduler.models) {
    names[name] = true;
  }
  if (loaded->scheduler.max_queue_depth != config.scheduler.max_queue_depth) {
    queue_depth_override = loaded->scheduler.max_queue_depth;
    for (const Child& c : children) {
      if (c.worker && c.running()) {
        SendControl(c, {shm::ControlCode::kSetMaxQueueDepth, 0, 0,
                        static_cast<int32_t>(loaded->scheduler.max_queue_depth)});
      }
    }
    applied.push_back("scheduler.max_queue_depth = " +
                      std::to_string(loaded->scheduler.max_queue_depth));
  }
  for (const auto& [name, unused] : names) {
    std::optional<int64_t> cap_before = CapOf(config.scheduler, name);
    std::optional<int64_t> cap_after = CapOf(loaded->scheduler, name);
    if (cap_before != cap_after) {
      batch_overrides[name] = cap_after;
      (void)SendToModel(name, shm::ControlCode::kSetMaxBatchSize, 0,
                        static_cast<int32_t>(cap_after.value_or(0)));
      applied.push_back("scheduler.models." + name + ".max_batch_size = " +
                        (cap_after ? std::to_string(*cap_after) : std::string("none")));
    }
  }
  for (const auto& [name, unused] : names) {
    double before = WeightOf(config.scheduler, name);
    double after = WeightOf(loaded->scheduler, name);
    if (before != after) {
      weight_overrides[name] = after;
      (void)SendToModel(name, shm::ControlCode::kSetPolicy, after, 0);
      applied.push_back("scheduler.models." + name + ".weight = " + std::to_string(after));
    }
  }
  if (config.scheduler.residency_mode == ResidencyMode::kManaged &&
      loaded->scheduler.residency_mode == ResidencyMode::kManaged) {
    for (const auto& [name, unused] : names) {
      Residency before = ResidencyOf(config.scheduler, name);
      Residency after = ResidencyOf(loaded->scheduler, name);
      if (before != after) {
        (void)SendToModel(name, shm::ControlCode::kSetResidencyFloor, 0,
                          static_cast<int32_t>(after));
        config.scheduler.models[name].residency = after;
        applied.push_back("scheduler.models." + name +
                          ".residency = " + std::string(ResidencyName(after)));
      }
    }
  }
  // Only what was applied is taken; the rest stays as started until ferryd restarts.
  config.scheduler.discipline = loaded->scheduler.discipline;
  config.scheduler.max_queue_depth = loaded->scheduler.max_queue_depth;
  for (const auto& [name, unused] : names) {
    config.scheduler.models[name].weight = WeightOf(loaded->scheduler, name);
    config.scheduler.models[name].max_batch_size = CapOf(loaded->scheduler, name);
  }
  for (const std::string& key : restart) {
    spdlog::warn("reload: {} changed; it takes effect when ferryd restarts", key);
  }
  spdlog::info("reloaded {}: {} change(s) applied live, {} need a restart", options.config_path,
               applied.size(), restart.size());
  sd_notify(0, "READY=1");
  return json{{"applied", applied}, {"restart_needed", restart}};
}

json Supervisor::Impl::StatusJson() const {
  int64_t now = MonotonicNs();
  json children_json = json::array();
  for (const Child& c : children) {
    json entry = {{"kind", c.worker ? "worker" : "hookhost"},
                  {"index", c.index},
                  {"slot", c.slot},
                  {"pid", c.running() ? c.process.pid : 0},
                  {"state", c.running()  ? std::string(shm::ProcessStateName(c.state()))
                            : c.finished ? "exited"
                                         : "restarting"},
                  {"generation", segment->generation(c.slot).load()},
                  {"restarts", c.restarts},
                  {"crash_looping", c.policy.CrashLooping(now)},
                  {"last_exit", c.last_exit},
                  {"heartbeat_age_ms", c.running() ? (now - c.heartbeat_ns) / 1'000'000 : -1}};
    if (c.worker) {
      entry["device"] = c.device.Describe();
      json models = json::array();
      if (c.running() && c.status) {
        for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
          json model = ModelControlJson(c.status->models[m]);
          model["queue_depth"] = c.status->models[m].queue_depth;
          model["outstanding"] = c.status->models[m].outstanding;
          models.push_back(model);
        }
      }
      entry["models"] = models;
    }
    children_json.push_back(entry);
  }
  std::string state = phase != Phase::kRunning ? std::string(PhaseName(phase))
                      : Degraded(now)          ? "degraded"
                      : NodeReady()            ? "ready"
                                               : "starting";
  return {{"node", config.node.name},
          {"state", state},
          {"live", true},
          {"ready", phase == Phase::kRunning && NodeReady()},
          {"model_table", model_table},
          {"models_changing", refresh_current.has_value() || !refresh_queue.empty()},
          {"segment", segment->name()},
          {"listen",
           {{"http", http ? http->bound() : bound_http},
            {"grpc", grpc ? grpc->bound() : bound_grpc},
            {"metrics", metrics_listener->bound()}}},
          {"pid", getpid()},
          {"children", children_json}};
}

Result<json> Supervisor::Impl::Handle(const control::ControlRequest& request) {
  switch (request.command) {
    case control::Command::kStatus:
      return StatusJson();
    case control::Command::kSchedulerMetrics:
    case control::Command::kControlStatus: {
      json workers = json::array();
      for (const Child& c : children) {
        if (!c.worker) {
          continue;
        }
        json entry = {{"worker", c.index}, {"slot", c.slot}, {"running", c.running()}};
        json models = json::array();
        if (c.running() && c.status) {
          entry.update(WorkerSummaryJson(*c.status));
          for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
            models.push_back(request.command == control::Command::kSchedulerMetrics
                                 ? ModelMetricsJson(c.status->models[m])
                                 : ModelControlJson(c.status->models[m]));
          }
        }
        entry["models"] = models;
        workers.push_back(entry);
      }
      return json{{"workers", workers}};
    }
    case control::Command::kSetPolicy: {
      FERRY_ASSIGN_OR_RETURN(
          json sent, SendToModel(request.model, shm::ControlCode::kSetPolicy, request.weight, 0));
      weight_overrides[request.model] = request.weight;
      spdlog::info("set_policy: model '{}' weight {}", request.model, request.weight);
      return sent;
    }
    case control::Command::kSetResidency:
      if (config.scheduler.residency_mode != ResidencyMode::kExternal) {
        return InvalidArgument(
            "set_residency needs scheduler.residency_mode = \"external\"; this node manages "
            "residency itself");
      }
      return SendToModel(request.model, shm::ControlCode::kSetResidency, 0,
                         static_cast<int32_t>(request.residency));
    case control::Command::kSetDiscipline: {
      size_t sent = 0;
      for (const Child& c : children) {
        if (c.worker && c.running()) {
          sent += SendControl(c, {shm::ControlCode::kSetDiscipline, 0, 0,
                                  static_cast<int32_t>(request.discipline)})
                      ? 1
                      : 0;
        }
      }
      discipline_override = request.discipline;
      spdlog::info("set_discipline: {}", DisciplineName(request.discipline));
      return json{{"workers", sent}};
    }
    case control::Command::kCompact: {
      size_t sent = 0;
      for (const Child& c : children) {
        if (c.worker && c.running()) {
          sent += SendControl(c, {shm::ControlCode::kCompact, 0, 0, 0}) ? 1 : 0;
        }
      }
      return json{{"workers", sent}};
    }
    case control::Command::kReload:
      return Reload();
    case control::Command::kDrain:
      BeginShutdown("ferryctl drain", MonotonicNs());
      return json{{"state", std::string(PhaseName(phase))}};
    case control::Command::kLoad:
      return LoadModel(request.model);
    case control::Command::kUnload:
      return UnloadModel(request.model);
  }
  return Internal("unhandled command");
}

}  // namespace ferry::supervisor
