// ferryd's supervisor: start, the event loop, shutdown, readiness and systemd.
#include "supervisor/supervisor.h"

#include <fcntl.h>

#include "common/log_settings.h"
#include "common/thread_name.h"
#include "shm/key_table.h"
#include "shm/tenant_counts.h"
#include "supervisor/api_keys.h"
#include "supervisor/supervisor_impl.h"

namespace ferry::supervisor {

namespace {

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

}  // namespace

std::string_view PhaseName(Phase p) {
  switch (p) {
    case Phase::kRunning:
      return "running";
    case Phase::kAnnouncingDrain:
      return "announcing its drain";
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
      shm::TlsStore::Remove(impl_->segment->name());
      impl_->RemoveTraces();
    }
    return 1;
  }
  impl_->Loop();
  impl_->StopMetrics();
  impl_->RemoveTraces();
  shm::Segment::Remove(impl_->segment->name());
  shm::TlsStore::Remove(impl_->segment->name());
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
  FERRY_ASSIGN_OR_RETURN(std::vector<shm::KeyEntry> keys, CollectKeys(config));
  FERRY_ASSIGN_OR_RETURN(shm::Segment created, shm::Segment::Create(name, layout));
  segment.emplace(std::move(created));
  FERRY_RETURN_IF_ERROR(shm::PublishKeys(segment->keys(), keys));
  if (config.node.tls.enabled()) {
    FERRY_ASSIGN_OR_RETURN(shm::TlsPems pems, ReadTlsFiles(config.node.tls));
    FERRY_ASSIGN_OR_RETURN(shm::TlsStore store, shm::TlsStore::Create(name));
    tls.emplace(std::move(store));
    FERRY_RETURN_IF_ERROR(tls->Publish(pems));
    spdlog::info("TLS on HTTP and gRPC ({}{})", config.node.tls.cert,
                 config.node.tls.client_ca.empty() ? "" : "; client certificates required");
  }
  FERRY_RETURN_IF_ERROR(StartTraces());
  if (!config.tenants.empty()) {
    spdlog::info("{} API key(s) for {} tenant(s); auth {}", keys.size(), config.tenants.size(),
                 config.auth.required ? "required" : "optional");
  }

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
  if (config.node.agent || activated.count("agent") != 0) {
    FERRY_ASSIGN_OR_RETURN(Listener agent_socket,
                           listener("agent", config.node.agent.value_or(ListenAddress{})));
    WatchAgent(std::move(agent_socket));
  }
  for (const auto& [name, fd] : activated) {
    spdlog::info("{} socket from systemd socket activation (descriptor {})", name, fd);
  }
  FERRY_RETURN_IF_ERROR(StartMetrics());
  regions = std::make_unique<RegionBroker>(config.frontend.system_shared_memory);
  FERRY_RETURN_IF_ERROR(regions->Start());

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

void Supervisor::Impl::WatchAgent(Listener socket) {
  agent_listener.emplace(std::move(socket));
  fcntl(agent_listener->fd(), F_SETFL, fcntl(agent_listener->fd(), F_GETFL) | O_NONBLOCK);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kAgentTag;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, agent_listener->fd(), &event);
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
  metrics_thread = std::thread([this] {
    NameThisThread("ferry-metrics");
    metrics_server->Run();
  });
  return OkStatus();
}

void Supervisor::Impl::StopMetrics() {
  if (metrics_server != nullptr) {
    metrics_server->Stop();
    metrics_thread.join();
    metrics_server.reset();
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
  spdlog::info(
      "stopping the node ({}): {} s of notice to balancers, then hook hosts drain, then "
      "workers; drain timeout {} s",
      why, config.supervisor.drain_notice_seconds, config.supervisor.drain_timeout_seconds);
  sd_notify(0, "STOPPING=1");
  segment->node_stopping().store(1);  // Readiness and /v2/ferry/load say so from now.
  if (config.supervisor.drain_notice_seconds > 0) {
    phase = Phase::kAnnouncingDrain;
    notice_deadline = now + static_cast<int64_t>(config.supervisor.drain_notice_seconds * 1e9);
    return;
  }
  DrainHookhosts(now);
}

void Supervisor::Impl::DrainHookhosts(int64_t now) {
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
  if (phase == Phase::kAnnouncingDrain && now >= notice_deadline) {
    DrainHookhosts(now);
  }
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
  // The hook hosts see one another's requests per tenant through this copy (tenant limits).
  shm::CopyTenantCounts(*segment);
  PropagateLogSettings();
  PumpTraces();
  for (Child& c : children) {
    if (c.running()) {
      Watch(c, now);
    } else if (c.waiting && !c.finished && phase == Phase::kRunning && now >= c.restart_at) {
      StartChild(c, now);
    }
  }
  TakeRepositoryRequests(now);
  FinishUnloads(now);
  AnswerRepositoryChange(now);
  RefreshHookhosts(now);
  if (phase != Phase::kRunning) {
    AdvanceShutdown(now);
  }
  Notify(now);
}

void Supervisor::Impl::PropagateLogSettings() {
  log_requests_seen.resize(segment->hookhosts(), 0);
  for (uint32_t h = 0; h < segment->hookhosts(); ++h) {
    uint64_t request = segment->frontend_counters(segment->HookhostSlot(h))
                           .log_request.load(std::memory_order_acquire);
    if (request == 0 || request == log_requests_seen[h]) {
      continue;
    }
    log_requests_seen[h] = request;
    auto word = static_cast<int32_t>(static_cast<uint32_t>(request));
    LogSettings settings;
    if (!LogSettings::Decode(word, &settings)) {
      spdlog::warn("hook host {} asked for malformed log settings {:#x}", h, word);
      continue;
    }
    if (segment->log_settings().exchange(static_cast<uint32_t>(word)) ==
        static_cast<uint32_t>(word)) {
      continue;
    }
    ApplyLogSettings(settings);
    spdlog::info("log settings {:#x} (asked of hook host {}) for every process", word, h);
    for (const Child& c : children) {
      if (c.running()) {
        SendControl(c, {shm::ControlCode::kSetLogSettings, 0, 0, word});
      }
    }
  }
}

int64_t Supervisor::Impl::TickNs() const {
  bool settled = phase == Phase::kRunning && control->clients() == 0 && refresh_queue.empty() &&
                 !refresh_current && pending_unloads.empty() && !repository_change &&
                 std::all_of(children.begin(), children.end(),
                             [](const Child& c) { return c.ready() && c.kill_reason.empty(); });
  // Tenant limits see the other hook hosts' requests one tick late: keep the tick short.
  bool limits = std::any_of(config.tenants.begin(), config.tenants.end(),
                            [](const TenantSettings& t) { return t.max_queued > 0 || t.rate > 0; });
  if (!settled || limits) {
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
      } else if (tag == kAgentTag) {
        AnswerAgentChecks();
      } else if ((tag & kLogTag) != 0 && (tag & ~kLogTag) < children.size()) {
        PumpLog(children[tag & ~kLogTag], now);
      } else if (tag < children.size() && children[tag].running()) {
        OnExit(children[tag], now);
      }
    }
    control->Poll(now);  // Idle clients time out even when nothing arrives.
    Tick(now);
  }
}
}  // namespace ferry::supervisor
