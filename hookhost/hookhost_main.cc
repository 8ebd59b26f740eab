// ferry-hookhost: one sandboxed hook host (hookhost/hookhost.h). Started by ferryd; runnable
// by hand and from tests:
//   ferry-hookhost --segment ferry-NODE --slot N --config /etc/ferry/node.toml
// Start-up: node file, segment (its own object read-write, the workers' and the supervisor's
// read-only), the repository's manifests and plugins, then the sandbox ([hooks] sandbox),
// then the request flow's threads; *ready* in its status slot. The front end (KServe HTTP and
// gRPC on sockets ferryd hands down) calls the flow in process.
// Exit codes: 0 after stop or drain; 1 when it cannot start; 3 when `threads` plugin calls
// are stuck past call_timeout_ms (restart it).
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "common/cli.h"
#include "common/clock.h"
#include "config/node_config.h"
#include "hookhost/frontend/grpc_service.h"
#include "hookhost/frontend/kserve_service.h"
#include "hookhost/hookhost.h"
#include "hookhost/startup.h"
#include "net/http_server.h"
#include "shm/control.h"
#include "shm/ring.h"
#include "shm/status.h"

namespace ferry::hookhost {
namespace {

// The control ring's poll and the heartbeat's period: the same 20 ms as a worker's idle
// heartbeat and ferryd's watch tick (a stop or drain waits at most this long to be seen).
constexpr auto kControlPoll = std::chrono::milliseconds(20);

// [hooks] spin_us, or when absent (-1) 200 us where this process may run on 4 or more CPUs:
// with fewer, polling would take a core the worker and the client need (measured: fewer
// requests/s at 2-4 in flight on a 2-CPU machine, docs/hookhost.md "Threads").
int64_t SpinMicros(int64_t configured) {
  if (configured >= 0) {
    return configured;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int usable = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return usable >= 4 ? 200 : 0;
}

void Publish(shm::StatusWriter& status, shm::ProcessState state, uint32_t generation,
             const std::vector<HookModel>& models) {
  auto snapshot = std::make_unique<shm::StatusSnapshotData>();
  snapshot->state = static_cast<uint32_t>(state);
  snapshot->generation = generation;
  snapshot->published_ns = MonotonicNs();
  snapshot->num_models =
      static_cast<uint32_t>(std::min<size_t>(models.size(), shm::kMaxStatusModels));
  for (uint32_t m = 0; m < snapshot->num_models; ++m) {
    shm::ModelStatusData& out = snapshot->models[m];
    shm::CopyName(out.name, models[m].name);
    out.state = static_cast<uint32_t>(models[m].unloaded  ? shm::ModelLoadState::kUnloaded
                                      : models[m].failure ? shm::ModelLoadState::kFailed
                                                          : shm::ModelLoadState::kReady);
    if (models[m].failure) {
      shm::CopyName(out.error, models[m].failure->message);
    }
  }
  status.Publish(*snapshot);
}

// The KServe front end on inherited listening sockets: HTTP on its own I/O thread, gRPC on
// gRPC's threads (fed by an accept thread).
struct FrontEnd {
  std::unique_ptr<frontend::KServeService> service;
  std::unique_ptr<net::HttpServer> server;
  std::unique_ptr<frontend::GrpcFrontEnd> grpc;
  std::thread thread;

  Status Start(const shm::Segment& segment, const std::vector<HookModel>& models, HookHost* host,
               int fd, int grpc_fd, const FrontendSettings& settings) {
    service = std::make_unique<frontend::KServeService>(
        segment, models, host, settings.max_request_bytes, settings.tenants);
    net::HttpServerOptions options;
    options.max_body_bytes = settings.max_request_bytes;
    options.max_connections = static_cast<size_t>(settings.max_connections);
    options.request_timeout_ns = static_cast<int64_t>(settings.request_timeout_seconds * 1e9);
    options.idle_timeout_ns = static_cast<int64_t>(settings.idle_timeout_seconds * 1e9);
    frontend::KServeService* s = service.get();
    server = std::make_unique<net::HttpServer>(fd, options,
                                               [s](net::HttpRequest&& r, net::Responder respond) {
                                                 s->Handle(std::move(r), std::move(respond));
                                               });
    thread = std::thread([this] { server->Run(); });
    if (grpc_fd >= 0) {
      frontend::GrpcOptions grpc_options;
      grpc_options.max_message_bytes = settings.max_request_bytes;
      grpc_options.max_connections = static_cast<size_t>(settings.max_connections);
      grpc_options.idle_timeout_ms = static_cast<int64_t>(settings.idle_timeout_seconds * 1e3);
      grpc = std::make_unique<frontend::GrpcFrontEnd>(service.get(), grpc_fd, grpc_options);
      return grpc->Start();
    }
    return OkStatus();
  }
  // No request reaches the flow after this returns.
  void Drain() {
    if (server == nullptr) {
      return;
    }
    service->SetDraining();
    server->Drain();
    if (grpc != nullptr) {
      grpc->Drain();
    }
    while (!server->DrainSeen()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bool Drained() const { return server == nullptr || server->Drained(); }
  // Writes what was answered (within `wait`), then closes every connection.
  void Stop(std::chrono::milliseconds wait) {
    if (server == nullptr) {
      return;
    }
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (!server->Drained() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    server->Stop();
    thread.join();
    if (grpc != nullptr) {
      grpc->Stop(static_cast<int>(wait.count()));
    }
  }
};

// How long a hook host that asked for a restart answers what it has taken before it exits.
constexpr int64_t kRestartDrainNs = 10'000'000'000;

int Main(const std::string& segment_name, uint32_t slot, const std::string& config_path,
         int http_fd, int grpc_fd, const std::optional<std::string>& table) {
  Result<NodeConfig> config = LoadNodeConfig(config_path, SchedulerEnvironment());
  if (!config.ok()) {
    spdlog::error("invalid node file:\n{}", config.error().message);
    return 1;
  }
  Result<shm::Segment> segment = shm::Segment::Attach(segment_name, slot);
  if (!segment.ok()) {
    spdlog::error("{}", segment.error().ToString());
    return 1;
  }
  if (segment->IsWorkerSlot(slot)) {
    spdlog::error("slot {} is not a hook host slot of '{}' (hook hosts are 0 to {})", slot,
                  segment_name, segment->hookhosts() - 1);
    return 1;
  }
  uint32_t generation = segment->generation(slot).load(std::memory_order_acquire);
  shm::StatusWriter status(*segment, slot);
  Publish(status, shm::ProcessState::kStarting, generation, {});

  bool strict = config->hooks.sandbox == SandboxMode::kStrict;
  std::optional<std::vector<std::string>> names;
  if (table) {
    names = SplitModelTable(*table);
  }
  Result<LoadedModels> loaded =
      LoadModelsConfined(config->node.model_repository, names, strict, config->hooks.max_memory);
  if (!loaded.ok()) {
    spdlog::error("{}", loaded.error().ToString());
    return 1;
  }
  spdlog::info("hook host slot {}: plugins loaded {}", slot, loaded->confinement);
  std::vector<HookModel>* models = &loaded->models;
  for (const HookModel& m : *models) {
    if (m.failure) {
      spdlog::error("model '{}' unusable: {}", m.name, m.failure->ToString());
    }
  }
  int64_t spin_us = SpinMicros(config->hooks.spin_us);  // Before the sandbox: it reads affinity.
  if (strict) {
    Result<SandboxReport> report = Seal(*loaded);
    if (!report.ok()) {
      spdlog::error("cannot enter the sandbox: {}", report.error().ToString());
      return 1;
    }
    spdlog::info("hook host slot {}: sandboxed ({})", slot, report->Describe());
  } else {
    spdlog::warn("hook host slot {}: [hooks] sandbox = \"off\": plugins run unconfined", slot);
  }

  HookHostOptions options;
  options.gateway = config->gateway.mode;
  options.threads = static_cast<int>(config->hooks.threads);
  options.call_timeout_ms = config->hooks.call_timeout_ms;
  options.max_pending = static_cast<size_t>(config->hooks.max_pending);
  options.spin_ns = spin_us * 1000;
  // The workers' queue limit, which the gateway checks before sending.
  options.max_queue_depth.assign(models->size(),
                                 static_cast<uint64_t>(config->scheduler.max_queue_depth));
  auto host = std::make_unique<HookHost>(*segment, slot, *models, options);
  host->Start();
  FrontEnd front;
  if (http_fd >= 0) {
    if (Status started =
            front.Start(*segment, *models, host.get(), http_fd, grpc_fd, config->frontend);
        !started.ok()) {
      spdlog::error("hook host slot {}: {}", slot, started.error().ToString());
      std::fflush(nullptr);
      _exit(1);
    }
  }
  Publish(status, shm::ProcessState::kReady, generation, *models);
  spdlog::info("hook host slot {} serving {} models", slot, models->size());

  shm::RingConsumer control(*segment, segment->ControlRing(slot));
  bool draining = false;
  int code = 0;
  int64_t restart_deadline = 0;  // Set when a spinning plugin call asks for a restart.
  while (true) {
    status.Beat();
    shm::DescriptorData d{};
    bool stop = false;
    while (control.TryPop(&d) == shm::RingStatus::kOk) {
      Result<shm::ControlMessage> message = shm::DecodeControl(d, 0);
      if (!message.ok()) {
        control.CountInvalid();
        spdlog::warn("hook host slot {}: control: {}", slot, message.error().ToString());
        continue;
      }
      if (message->code == shm::ControlCode::kStop) {
        stop = true;
      } else if (message->code == shm::ControlCode::kDrain && !draining) {
        draining = true;
        front.Drain();  // No new request; those read are answered.
        Publish(status, shm::ProcessState::kDraining, generation, *models);
      }
    }
    if (!draining && host->wants_restart()) {
      // A spinning call takes a core for as long as it runs: stop taking requests, answer
      // those taken (for up to 10 s), then exit for a restart.
      spdlog::error("hook host slot {}: a plugin call spins past its limit; draining to restart",
                    slot);
      draining = true;
      front.Drain();
      Publish(status, shm::ProcessState::kDraining, generation, *models);
      restart_deadline = MonotonicNs() + kRestartDrainNs;
    }
    bool drained = draining && host->pending() == 0 && front.Drained();
    if (restart_deadline != 0 && (drained || MonotonicNs() > restart_deadline)) {
      Publish(status, shm::ProcessState::kUnhealthy, generation, *models);
      code = 3;
      break;
    }
    if (stop || drained) {
      break;
    }
    if (!host->healthy()) {
      spdlog::error("hook host slot {}: {} plugin calls stuck; exiting for a restart", slot,
                    options.threads);
      Publish(status, shm::ProcessState::kUnhealthy, generation, *models);
      code = 3;
      break;
    }
    std::this_thread::sleep_for(kControlPoll);
  }
  front.Drain();
  if (host->timed_out_calls() == 0) {
    host.reset();  // Answers what is left and hands the workers' blocks back.
  }
  front.Stop(std::chrono::milliseconds(1000));  // Those answers are written, then closed.
  if (code == 0) {
    Publish(status, shm::ProcessState::kStopped, generation, *models);
  }
  // No exit handlers: a stuck plugin call may still run, and a leak checker would need
  // ptrace, which the sandbox refuses.
  std::fflush(nullptr);
  _exit(code);
}

}  // namespace
}  // namespace ferry::hookhost

int main(int argc, char** argv) {
  CLI::App app{"ferry-hookhost: sandboxed hook plugin host and front end; started by ferryd"};
  std::string segment;
  uint32_t slot = 0;
  std::string config;
  app.add_option("--segment", segment, "shared-memory segment name (ferry-<node name>)")
      ->required();
  app.add_option("--slot", slot, "this hook host's slot in the segment")->required();
  app.add_option("--config", config, "the node file")->required();
  int http_fd = -1;
  app.add_option("--http-fd", http_fd,
                 "an inherited listening socket to serve KServe v2 HTTP on (set by ferryd)");
  int grpc_fd = -1;
  app.add_option("--grpc-fd", grpc_fd,
                 "an inherited listening socket to serve KServe v2 gRPC on (with --http-fd)");
  std::optional<std::string> table;
  app.add_option("--models", table,
                 "the node's model table, by index: names, '-' for an unloaded one (set by ferryd; "
                 "default: the repository's bundles in name order)");
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto status = ferry::ApplyLogFlags("ferry-hookhost", log_flags); !status.ok()) {
    std::cerr << status.error().ToString() << "\n";
    return 1;
  }
  return ferry::hookhost::Main(segment, slot, config, http_fd, grpc_fd, table);
}
