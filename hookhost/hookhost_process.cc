#include "hookhost/hookhost_process.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "common/clock.h"
#include "common/log_settings.h"
#include "common/poll.h"
#include "config/node_config.h"
#include "hookhost/frontend/front_end.h"
#include "hookhost/hookhost.h"
#include "hookhost/startup.h"
#include "net/tls_context.h"
#include "shm/control.h"
#include "shm/ring.h"
#include "shm/status.h"
#include "shm/tls_store.h"
#include "shm/trace_store.h"

namespace ferry::hookhost {
namespace {

// The control ring's poll and the heartbeat's period: the same 20 ms as a worker's idle
// heartbeat and ferryd's watch tick (a stop or drain waits at most this long to be seen).
constexpr auto kControlPoll = std::chrono::milliseconds(20);

// How long a hook host that asked for a restart answers what it has taken before it exits
// (a plugin call past its limit may be burning a core all the while).
constexpr int64_t kRestartDrainNs = 2'000'000'000;

// `fault_model`: the wire index of the model whose plugin call made this host ask for a
// restart (-1: none), for ferryd (StatusSnapshotData::fault_model).
void Publish(shm::StatusWriter& status, shm::ProcessState state, uint32_t generation,
             const std::vector<HookModel>& models, int fault_model = -1) {
  auto snapshot = std::make_unique<shm::StatusSnapshotData>();
  snapshot->state = static_cast<uint32_t>(state);
  snapshot->generation = generation;
  snapshot->fault_model = fault_model >= 0 ? static_cast<uint32_t>(fault_model) + 1 : 0;
  snapshot->published_ns = MonotonicNs();
  snapshot->num_models =
      static_cast<uint32_t>(std::min<size_t>(models.size(), shm::kMaxStatusModels));
  for (uint32_t m = 0; m < snapshot->num_models; ++m) {
    shm::ModelStatusData& out = snapshot->models[m];
    shm::CopyName(out.name, models[m].key);
    out.state = static_cast<uint32_t>(models[m].unloaded  ? shm::ModelLoadState::kUnloaded
                                      : models[m].failure ? shm::ModelLoadState::kFailed
                                                          : shm::ModelLoadState::kReady);
    if (models[m].failure) {
      shm::CopyName(out.error, models[m].failure->message);
    }
  }
  status.Publish(*snapshot);
}

// The models ferryd names (their plugin calls ran past their limit too often) are served no
// more by this host: each request is refused at once, naming why.
void MarkPluginsFailed(const std::vector<std::string>& names, const HookSettings& hooks,
                       std::vector<HookModel>* models) {
  for (HookModel& m : *models) {
    if (std::find(names.begin(), names.end(), m.key) != names.end() && !m.failure) {
      m.failure =
          Unavailable("its plugin was marked failed after " +
                      std::to_string(hooks.max_plugin_faults) + " calls past call_timeout_ms (" +
                      std::to_string(hooks.call_timeout_ms) + " ms), each of which " +
                      "restarted a hook host; `ferryctl unload` and `load` it to retry");
    }
  }
}

[[noreturn]] void Exit(int code) {
  std::fflush(nullptr);
  _exit(code);
}

// A started hook host: what its control loop and its shutdown work on.
struct Running {
  uint32_t slot = 0;
  uint32_t generation = 0;
  NodeConfig config;
  std::optional<shm::Segment> segment;
  std::optional<shm::StatusWriter> status;
  std::optional<LoadedModels> loaded;
  std::unique_ptr<HookHost> host;
  std::optional<frontend::Authenticator> auth;       // Before `front`, which uses it.
  std::optional<shm::TlsStore> tls;                  // Likewise; with [node.listen] tls_*.
  std::optional<shm::TraceStore> traces;             // Likewise; with [trace] otlp_endpoint.
  std::unique_ptr<frontend::ClientRegions> regions;  // Likewise; with --region-fd.
  frontend::FrontEnd front;

  const std::vector<HookModel>& models() const { return loaded->models; }
  void Publish(shm::ProcessState state, int fault_model = -1) {
    hookhost::Publish(*status, state, generation, models(), fault_model);
  }
};

// The certificate ferryd published, mapped and built once before the sandbox: OpenSSL reads
// its configuration file at its first use, which the sandbox would refuse. Exits 1 when there
// is none or it does not build.
void OpenTls(const HookHostProcessArgs& args, Running& r) {
  Result<shm::TlsStore> store = shm::TlsStore::Open(args.segment);
  Result<shm::TlsPems> pems = store.ok() ? store->Read() : Result<shm::TlsPems>(store.error());
  Result<net::TlsContext> context =
      pems.ok() ? net::MakeServerContext({pems->cert_chain, pems->key, pems->client_ca})
                : Result<net::TlsContext>(pems.error());
  if (!context.ok()) {
    spdlog::error("hook host slot {}: TLS: {}", args.slot, context.error().ToString());
    Exit(1);
  }
  r.tls.emplace(std::move(*store));
}

// Node file, segment, models and plugins (loaded confined), then the sandbox. Exits 1 on
// failure.
void LoadAndSeal(const HookHostProcessArgs& args, Running& r, int64_t* spin_us) {
  // The listening sockets came without close-on-exec (that is how they crossed exec); no
  // other exec may take them. The sandbox refuses exec anyway: this is the second wall.
  for (int fd : {args.http_fd, args.grpc_fd, args.region_fd}) {
    if (fd >= 0) {
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  Result<NodeConfig> config = LoadNodeConfig(args.config, SchedulerEnvironment());
  if (!config.ok()) {
    spdlog::error("invalid node file:\n{}", config.error().message);
    Exit(1);
  }
  r.config = std::move(*config);
  Result<shm::Segment> segment = shm::Segment::Attach(args.segment, args.slot);
  if (!segment.ok()) {
    spdlog::error("{}", segment.error().ToString());
    Exit(1);
  }
  if (segment->IsWorkerSlot(args.slot)) {
    spdlog::error("slot {} is not a hook host slot of '{}' (hook hosts are 0 to {})", args.slot,
                  args.segment, segment->hookhosts() - 1);
    Exit(1);
  }
  r.segment.emplace(std::move(*segment));
  if (LogSettings node;
      LogSettings::Decode(static_cast<int32_t>(r.segment->log_settings().load()), &node)) {
    ApplyLogSettings(node);  // As a client set them for the node, across this host's restart.
  }
  r.generation = r.segment->generation(args.slot).load(std::memory_order_acquire);
  r.status.emplace(*r.segment, args.slot);
  hookhost::Publish(*r.status, shm::ProcessState::kStarting, r.generation, {});

  if (r.config.node.tls.enabled()) {
    OpenTls(args, r);
  }
  if (!r.config.trace.otlp_endpoint.empty()) {
    // Mapped now: the sandbox forbids opening it later.
    Result<shm::TraceStore> traces = shm::TraceStore::Open(args.segment, args.slot);
    if (!traces.ok()) {
      spdlog::error("hook host slot {}: traces: {}", args.slot, traces.error().ToString());
      Exit(1);
    }
    r.traces.emplace(std::move(*traces));
  }
  bool strict = r.config.hooks.sandbox == SandboxMode::kStrict;
  std::optional<std::vector<std::string>> names;
  if (args.models) {
    names = SplitModelTable(*args.models);
  }
  Result<LoadedModels> loaded =
      LoadModelsConfined(r.config.node.model_repository, names, strict, r.config.hooks.max_memory);
  if (!loaded.ok()) {
    spdlog::error("{}", loaded.error().ToString());
    Exit(1);
  }
  if (args.failed_plugins) {
    MarkPluginsFailed(SplitModelTable(*args.failed_plugins), r.config.hooks, &loaded->models);
  }
  r.loaded.emplace(std::move(*loaded));
  spdlog::info("hook host slot {}: plugins loaded {}", args.slot, r.loaded->confinement);
  for (const HookModel& m : r.models()) {
    if (m.failure) {
      spdlog::error("model '{}' unusable: {}", m.name, m.failure->ToString());
    }
  }
  *spin_us = PollMicros(r.config.hooks.spin_us);  // Before the sandbox: it reads affinity.
  if (!strict) {
    spdlog::warn("hook host slot {}: [hooks] sandbox = \"off\": plugins run unconfined", args.slot);
    return;
  }
  Result<SandboxReport> report = Seal(*r.loaded);
  if (!report.ok()) {
    spdlog::error("cannot enter the sandbox: {}", report.error().ToString());
    Exit(1);
  }
  spdlog::info("hook host slot {}: sandboxed ({})", args.slot, report->Describe());
}

// [tenants.NAME] max_queued and rate by tenant number ([frontend] tenants' order, 1-based).
std::vector<TenantLimit> TenantLimits(const NodeConfig& config) {
  std::vector<TenantLimit> limits(config.frontend.tenants.size() + 1);
  for (const TenantSettings& t : config.tenants) {
    const std::vector<std::string>& names = config.frontend.tenants;
    auto at = std::find(names.begin(), names.end(), t.name);
    if (at != names.end()) {
      limits[static_cast<size_t>(at - names.begin()) + 1] = {
          t.name, static_cast<uint64_t>(t.max_queued), t.rate, t.burst};
    }
  }
  return limits;
}

// The request flow's threads, then the front end. Exits 1 when the front end cannot start.
void StartServing(const HookHostProcessArgs& args, Running& r, int64_t spin_us) {
  HookHostOptions options;
  options.gateway = r.config.gateway.mode;
  options.threads = static_cast<int>(r.config.hooks.threads);
  options.call_timeout_ms = r.config.hooks.call_timeout_ms;
  options.stall_ns = r.config.gateway.stall_ms * 1'000'000;
  options.max_pending = static_cast<size_t>(r.config.hooks.max_pending);
  options.spin_ns = spin_us * 1000;
  // The workers' queue limit, which the gateway checks before sending.
  options.max_queue_depth.assign(r.models().size(),
                                 static_cast<uint64_t>(r.config.scheduler.max_queue_depth));
  options.tenant_limits = TenantLimits(r.config);
  r.host = std::make_unique<HookHost>(*r.segment, args.slot, r.models(), options);
  r.host->Start();
  if (args.http_fd >= 0) {
    r.auth.emplace(&r.segment->keys(), r.config);
    if (args.region_fd >= 0) {
      r.regions = std::make_unique<frontend::ClientRegions>(args.region_fd);
    }
    if (Status started = r.front.Start(
            *r.segment, r.models(), r.host.get(), args.http_fd, args.grpc_fd, r.config.frontend,
            &*r.auth, r.tls ? &*r.tls : nullptr, r.traces ? &*r.traces : nullptr, r.regions.get());
        !started.ok()) {
      spdlog::error("hook host slot {}: {}", args.slot, started.error().ToString());
      Exit(1);
    }
  }
  r.Publish(shm::ProcessState::kReady);
  spdlog::info("hook host slot {} serving {} models", args.slot, r.models().size());
}

// Follows the control ring until stopped, drained, or unhealthy; returns the exit code.
int Serve(Running& r) {
  shm::RingConsumer control(*r.segment, r.segment->ControlRing(r.slot));
  bool draining = false;
  int64_t restart_deadline = 0;  // Set when a plugin call past its limit asks for a restart.
  auto drain = [&] {
    draining = true;
    r.front.Drain();  // No new request; those read are answered.
    r.Publish(shm::ProcessState::kDraining);
  };
  while (true) {
    r.status->Beat();
    shm::DescriptorData d{};
    bool stop = false;
    while (control.TryPop(&d) == shm::RingStatus::kOk) {
      Result<shm::ControlMessage> message = shm::DecodeControl(d, 0);
      if (!message.ok()) {
        control.CountInvalid();
        spdlog::warn("hook host slot {}: control: {}", r.slot, message.error().ToString());
        continue;
      }
      if (message->code == shm::ControlCode::kStop) {
        stop = true;
      } else if (message->code == shm::ControlCode::kSetLogSettings) {
        LogSettings settings;
        LogSettings::Decode(message->value, &settings);  // DecodeControl checked the word.
        ApplyLogSettings(settings);
        spdlog::info("hook host slot {}: log settings now {:#x}", r.slot, message->value);
      } else if (message->code == shm::ControlCode::kDrain && !draining) {
        drain();
      }
    }
    if (!draining && r.host->wants_restart()) {
      // The call cannot be stopped here: stop taking requests, answer those taken (for up to
      // kRestartDrainNs), then exit, which stops it.
      spdlog::error(
          "hook host slot {}: a plugin call ran past call_timeout_ms; draining to restart", r.slot);
      drain();
      restart_deadline = MonotonicNs() + kRestartDrainNs;
    }
    bool drained = draining && r.host->pending() == 0 && r.front.Drained();
    if (restart_deadline != 0 && (drained || MonotonicNs() > restart_deadline)) {
      r.Publish(shm::ProcessState::kUnhealthy, r.host->faulted_model());
      return 3;
    }
    if (stop || drained) {
      return 0;
    }
    if (!r.host->healthy()) {
      spdlog::error("hook host slot {}: {} plugin calls stuck; exiting for a restart", r.slot,
                    r.config.hooks.threads);
      r.Publish(shm::ProcessState::kUnhealthy, r.host->faulted_model());
      return 3;
    }
    std::this_thread::sleep_for(kControlPoll);
  }
}

}  // namespace

void RunHookHostProcess(const HookHostProcessArgs& args) {
  Running r;
  r.slot = args.slot;
  int64_t spin_us = 0;
  LoadAndSeal(args, r, &spin_us);
  StartServing(args, r, spin_us);
  int code = Serve(r);
  r.front.Drain();
  if (r.host->timed_out_calls() == 0) {
    r.host.reset();  // Answers what is left and hands the workers' blocks back.
  }
  r.front.Stop(std::chrono::milliseconds(1000));  // Those answers are written, then closed.
  if (code == 0) {
    r.Publish(shm::ProcessState::kStopped);
  }
  // No exit handlers: a stuck plugin call may still run, and a leak checker would need
  // ptrace, which the sandbox refuses.
  Exit(code);
}

}  // namespace ferry::hookhost
