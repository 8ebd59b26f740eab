// The supervisor's children: starting, watching, reconfiguring and killing worker and hook
// host processes.
#include <sys/socket.h>

#include "supervisor/supervisor_impl.h"

namespace ferry::supervisor {

void Supervisor::Impl::StartChild(Child& c, int64_t now) {
  ChildSpec spec;
  int region_end = -1;
  spec.binary = c.worker ? options.worker_binary : options.hookhost_binary;
  spec.args = {"--segment", segment->name(),    "--slot", std::to_string(c.slot),
               "--config",  options.config_path};
  spec.args.insert(spec.args.end(), options.child_log_args.begin(), options.child_log_args.end());
  std::string table;
  for (const std::string& entry : model_table) {
    table += (table.empty() ? "" : ",") + entry;
  }
  spec.args.insert(spec.args.end(), {"--models", table});
  if (!c.worker && !failed_plugins.empty()) {
    std::string failed;
    for (const auto& [name, why] : failed_plugins) {
      failed += (failed.empty() ? "" : ",") + name;
    }
    spec.args.insert(spec.args.end(), {"--failed-plugins", failed});
  }
  if (!c.worker) {
    // Only while running: nothing is restarted once stopping.
    spec.fds = {http->fd(), grpc->fd()};
    spec.args.insert(spec.args.end(), {"--http-fd", "3", "--grpc-fd", "4"});
    // The system shared-memory extension's socket (region_broker.h): a new pair per start.
    int pair[2];
    if (regions && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0) {
      regions->Attach(c.slot, pair[0]);
      region_end = pair[1];
      spec.fds.push_back(region_end);
      spec.args.insert(spec.args.end(), {"--region-fd", "5"});
    } else if (regions) {
      spdlog::warn("{}: no region socket ({}): system shared memory off there", c.Name(),
                   std::strerror(errno));
    }
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
  if (!c.worker) {
    OpenLogRelay(c, &spec, now);
  }
  Result<ChildProcess> started = Spawn(spec);
  if (region_end >= 0) {
    close(region_end);  // The child's copy is its own.
  }
  if (c.log && c.log->write_fd() >= 0) {
    c.log->CloseWriteEnd();
    epoll_event log_event{};
    log_event.events = EPOLLIN;
    log_event.data.u64 = kLogTag | static_cast<uint64_t>(&c - children.data());
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.log->read_fd(), &log_event);
  }
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

void Supervisor::Impl::OpenLogRelay(Child& c, ChildSpec* spec, int64_t now) {
  if (c.log) {  // A predecessor's pipe not yet ended: what is in it is relayed, then dropped.
    PumpLog(c, now);
    if (c.log) {
      epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.log->read_fd(), nullptr);
      c.log.reset();
    }
  }
  Result<LogRelay> relay = LogRelay::Open(c.Name() + "| ");
  if (relay.ok()) {
    c.log.emplace(std::move(*relay));
    spec->output_fd = c.log->write_fd();
  } else {
    spdlog::warn("{}: its output goes to ferryd's unrelayed: {}", c.Name(),
                 relay.error().ToString());
  }
}

void Supervisor::Impl::PumpLog(Child& c, int64_t now) {
  if (c.log && !c.log->Pump(STDERR_FILENO, now)) {
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.log->read_fd(), nullptr);
    c.log.reset();
  }
}

void Supervisor::Impl::OnExit(Child& c, int64_t now) {
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.process.pidfd, nullptr);
  pid_t pid = c.process.pid;
  int status = Reap(&c.process);
  PumpLog(c, now);  // Its last words first.
  c.last_exit = DescribeWaitStatus(status);
  if (std::string why = shm::ReadStartError(*segment, c.slot); !why.empty()) {
    c.last_exit += ": " + why;
  }
  if (!c.worker) {
    CountPluginFault(c);  // Before the reset clears what it published.
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

void Supervisor::Impl::CountPluginFault(const Child& c) {
  // Published as it turns unhealthy, before it exits 3 (or is killed for reporting so).
  std::optional<uint32_t> index = shm::ReadFaultModel(*segment, c.slot);
  if (!index || *index >= model_table.size() || model_table[*index] == "-") {
    return;
  }
  const std::string& name = model_table[*index];
  int64_t faults = ++plugin_faults[name];
  if (faults < config.hooks.max_plugin_faults || failed_plugins.count(name) != 0) {
    spdlog::warn(
        "model '{}': its plugin ran past call_timeout_ms ({} of {} before it is marked "
        "failed)",
        name, faults, config.hooks.max_plugin_faults);
    return;
  }
  failed_plugins[name] = std::to_string(faults) + " plugin calls ran past call_timeout_ms (" +
                         std::to_string(config.hooks.call_timeout_ms) +
                         " ms), each restarting a hook host";
  spdlog::error(
      "model '{}': plugin marked failed: {}; hook hosts refuse it from their next "
      "start (`ferryctl unload` and `load` it to retry)",
      name, failed_plugins[name]);
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
  for (const auto& [tenant, weight] : tenant_weight_overrides) {
    SendControl(c, {shm::ControlCode::kSetTenantWeight, 0, weight, static_cast<int32_t>(tenant)});
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

}  // namespace ferry::supervisor
