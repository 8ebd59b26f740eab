#include "worker/worker_process.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "common/log_settings.h"
#include "common/poll.h"
#include "config/node_config.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "shm/status.h"
#include "worker/backends/backend_module.h"
#include "worker/backends/cpu/affinity.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"
#include "worker/backends/sim/sim_backend.h"
#include "worker/dispatch_loop.h"
#include "worker/warm_up.h"
#include "worker/weight_residency.h"

namespace ferry::worker {
namespace {

static_assert(kMaxWorkers == shm::kMaxPerKind && kMaxHookhosts == shm::kMaxPerKind,
              "the node file's limits are the segment's");

// `device_pinned`: ferryd made this worker's GPU the only one it sees (CUDA_VISIBLE_DEVICES),
// so it is device 0 whatever its id on the host.
Result<std::unique_ptr<Backend>> MakeBackend(const NodeConfig& config, const shm::Segment& segment,
                                             uint32_t worker, bool device_pinned) {
  const DeviceSelection& devices = config.node.devices;
  // The segment may have more worker slots than the node file selects devices.
  size_t selected = devices.kind == DeviceSelection::Kind::kGpuList ? devices.gpu_ids.size()
                    : devices.kind == DeviceSelection::Kind::kCpu
                        ? static_cast<size_t>(devices.cpu_workers)
                        : SIZE_MAX;  // "all": CudaBackend::Create checks the device.
  if (worker >= selected) {
    return InvalidArgument("worker " + std::to_string(worker) +
                           " has no device: the node file selects " + std::to_string(selected));
  }
  if (config.node.backend == BackendKind::kSim) {
    std::map<std::string, SimCost> costs;
    for (const auto& [name, cost] : config.sim.models) {
      costs[name] = SimCost{cost.fixed_us * 1e-6, cost.per_row_us * 1e-6, {}};
    }
    SimCost fallback{
        config.sim.fallback.fixed_us * 1e-6, config.sim.fallback.per_row_us * 1e-6, {}};
    return std::unique_ptr<Backend>(std::make_unique<SimBackend>(costs, fallback));
  }
  if (devices.kind == DeviceSelection::Kind::kCpu) {
    if (config.cpu.pin) {
      std::vector<int> share =
          CpuShare(AllowedCpus(), static_cast<int>(worker), static_cast<int>(devices.cpu_workers));
      if (Status pinned = PinToCpus(share); !pinned.ok()) {
        spdlog::warn("not pinned: {}", pinned.error().ToString());
      }
    }
    CpuOptions options;
    options.threads = static_cast<unsigned>(config.cpu.threads);
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
  }
  FerryBackendArgs args{};
  args.device = device_pinned ? 0
                : devices.kind == DeviceSelection::Kind::kGpuList
                    ? static_cast<int>(devices.gpu_ids[worker])
                    : static_cast<int>(worker);
  std::vector<FerryHostRegion> regions;
  for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
    std::span<uint8_t> arena = segment.partition(segment.HookhostSlot(h));
    regions.push_back({arena.data(), arena.size(), 1});
  }
  std::span<uint8_t> own = segment.partition(segment.WorkerSlot(worker));
  regions.push_back({own.data(), own.size(), 0});
  args.regions = regions.data();
  args.num_regions = regions.size();
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) {  // Never a module from a directory relative to wherever the worker runs.
    return Unavailable("cannot find the worker's own directory: " + ec.message());
  }
  return LoadBackendModule(DefaultModuleDirs(self), kCudaModuleName, args);
}

// A worker's entry for model `name` (bundle null: failed or unloaded, `failure` says why):
// its executables built on `backend`, unless it is a pipeline.
LoopModel MakeLoopModel(const std::string& name, const Bundle* bundle, std::optional<Error> failure,
                        bool unloaded, Backend& backend) {
  LoopModel model;
  model.name = name;
  model.bundle = bundle;
  model.failure = std::move(failure);
  model.unloaded = unloaded;
  if (bundle != nullptr && bundle->manifest.pipeline()) {
    model.pipeline = true;
    model.failure =
        InvalidArgument("model '" + name + "' is a pipeline: the hook hosts run it, not a worker");
  } else if (bundle != nullptr) {
    int64_t start = MonotonicNs();
    Result<ModelHandle> handle = backend.Load(*bundle);
    if (handle.ok()) {
      model.handle = *handle;
      model.load_seconds = static_cast<double>(MonotonicNs() - start) * 1e-9;
    } else {
      model.failure = handle.error();
    }
  }
  if (model.failure && !model.pipeline && !model.unloaded) {
    spdlog::error("model '{}' failed to load: {}", name, model.failure->ToString());
  }
  return model;
}

// The weight budget: [worker] weight_budget, else the backend's default (a GPU's weight arena),
// on a backend that can release weights; null without one (every model stays resident).
std::unique_ptr<WeightResidency> MakeResidency(const NodeConfig& config, Backend& backend,
                                               Scheduler& scheduler, const shm::Segment& segment,
                                               uint32_t slot) {
  uint64_t budget = ChooseWeightBudget(config.worker.weight_budget, backend.DefaultWeightBudget());
  if (config.worker.weight_budget != 0 && budget < config.worker.weight_budget) {
    spdlog::warn("[worker] weight_budget {} is more than the {} backend holds; {} bytes",
                 config.worker.weight_budget, backend.name(), budget);
  }
  if (budget == 0) {
    return nullptr;
  }
  if (!backend.SupportsResidency()) {
    spdlog::warn("[worker] weight_budget ignored: the {} backend keeps every model resident",
                 backend.name());
    return nullptr;
  }
  spdlog::info("worker slot {}: weight budget {} bytes", slot, budget);
  ResidencyOptions options;
  options.budget = budget;
  options.mode = config.scheduler.residency_mode;
  options.evict_all = config.worker.eviction == WorkerSettings::Eviction::kAll;
  options.max_load_fraction = config.worker.max_load_fraction;
  return std::make_unique<WeightResidency>(&backend, &scheduler, options,
                                           [&segment, slot] { shm::RingDoorbell(segment, slot); });
}

// A started worker before its loop: what the loop and its loader need.
struct Started {
  NodeConfig config;
  std::optional<shm::Segment> segment;
  std::vector<RepositoryModel> repository;  // Owns the bundles `models` point into.
  std::unique_ptr<Backend> backend;
  std::vector<LoopModel> models;
  std::optional<Scheduler> scheduler;
  std::unique_ptr<WeightResidency> residency;  // Under [worker] weight_budget.
};

// Node file and segment; `status` is created on the segment and says *starting*. Returns 1
// (the exit code) on failure, 0 otherwise.
int Attach(const WorkerProcessArgs& args, Started& s, std::optional<shm::StatusWriter>& status,
           shm::StatusSnapshotData& starting) {
  Result<NodeConfig> config = LoadNodeConfig(args.config, SchedulerEnvironment());
  if (!config.ok()) {
    spdlog::error("invalid node file:\n{}", config.error().message);
    return 1;
  }
  s.config = std::move(*config);
  if (args.slot == shm::kSupervisor) {
    spdlog::error("slot {} is not a worker slot of '{}'", args.slot, args.segment);
    return 1;
  }
  // Its own object read-write, the hook hosts' and the supervisor's read-only.
  Result<shm::Segment> segment = shm::Segment::Attach(args.segment, args.slot);
  if (!segment.ok()) {
    spdlog::error("{}", segment.error().ToString());
    return 1;
  }
  if (!segment->IsWorkerSlot(args.slot)) {
    spdlog::error("slot {} is not a worker slot of '{}' (workers are {} to {})", args.slot,
                  args.segment, segment->hookhosts(), segment->num_slots() - 1);
    return 1;
  }
  s.segment.emplace(std::move(*segment));
  // Log settings a client set for the node (logging extension) outlive a restart.
  if (LogSettings node;
      LogSettings::Decode(static_cast<int32_t>(s.segment->log_settings().load()), &node)) {
    ApplyLogSettings(node);
  }
  status.emplace(*s.segment, args.slot);
  starting.state = static_cast<uint32_t>(shm::ProcessState::kStarting);
  starting.generation = s.segment->generation(args.slot).load(std::memory_order_acquire);
  starting.published_ns = MonotonicNs();
  status->Publish(starting);
  return 0;
}

// The model table, the backend, each model built on it, and the scheduler over them, warmed
// up. Returns 1 (the exit code) on failure, 0 otherwise.
int Build(const WorkerProcessArgs& args, Started& s, shm::StatusWriter& status,
          shm::StatusSnapshotData& starting) {
  // ferryd hands down the node's model table (models loaded and unloaded while it ran keep
  // their indices); run alone, a worker lists the repository.
  const std::string& dir = s.config.node.model_repository;
  Result<std::vector<RepositoryModel>> repository =
      args.models ? LoadModelTable(dir, SplitModelTable(*args.models)) : LoadRepository(dir);
  if (!repository.ok()) {
    spdlog::error("{}", repository.error().ToString());
    return 1;
  }
  Result<std::unique_ptr<Backend>> backend =
      MakeBackend(s.config, *s.segment, args.slot - s.segment->hookhosts(), args.device_pinned);
  if (!backend.ok()) {
    // Left in the status for ferryd, which reports it as this worker's last exit.
    spdlog::error("{}", backend.error().ToString());
    shm::CopyName(starting.start_error, backend.error().ToString());
    starting.published_ns = MonotonicNs();
    status.Publish(starting);
    return 1;
  }
  s.backend = std::move(*backend);
  s.repository = std::move(*repository);
  std::vector<ModelSpec> specs;
  for (const RepositoryModel& entry : s.repository) {
    specs.push_back(SpecForModel(entry));
  }
  // Under ferryd, settings for a model unloaded since the node started (or not loaded yet)
  // wait for its load.
  SchedulerOptions scheduler_options;
  scheduler_options.settings_for_later_models = args.models.has_value();
  if (specs.empty()) {
    spdlog::warn("model repository {} holds no model", dir);
  }
  Result<Scheduler> scheduler =
      specs.empty() ? Result<Scheduler>(InvalidArgument("no models to serve"))
                    : Scheduler::Create(s.config.scheduler, std::move(specs), scheduler_options);
  if (!scheduler.ok()) {
    spdlog::error("{}", scheduler.error().ToString());
    return 1;
  }
  s.scheduler.emplace(std::move(*scheduler));
  for (const std::string& warning : s.config.scheduler.deprecations) {
    spdlog::warn("{}", warning);
  }
  s.residency = MakeResidency(s.config, *s.backend, *s.scheduler, *s.segment, args.slot);
  // One model at a time: built, warmed up, then kept or released by its residency floor, so
  // a budget holds from the start (plus the one model being built).
  for (const RepositoryModel& entry : s.repository) {
    auto index = static_cast<int>(s.models.size());
    s.models.push_back(
        MakeLoopModel(entry.name, entry.bundle.get(), entry.failure, entry.unloaded, *s.backend));
    WarmUp(*s.backend, *s.scheduler, s.models, index);
    LoopModel& model = s.models.back();
    if (s.residency != nullptr && !model.failure && model.handle >= 0) {
      Status kept = s.residency->Add(index, model.name, model.handle,
                                     s.scheduler->model(index).config.residency);
      if (!kept.ok()) {
        spdlog::error("{}", kept.error().ToString());
        model.failure = kept.error();
      }
    }
  }
  return 0;
}

}  // namespace

int RunWorkerProcess(const WorkerProcessArgs& args) {
  prctl(PR_SET_TIMERSLACK, 1UL);  // Sleeps until a batch's end must not overshoot by 50 us.
  Started s;
  std::optional<shm::StatusWriter> status;
  auto starting = std::make_unique<shm::StatusSnapshotData>();
  if (int code = Attach(args, s, status, *starting); code != 0) {
    return code;
  }
  if (int code = Build(args, s, *status, *starting); code != 0) {
    return code;
  }
  DispatchLoopOptions options;
  // The idle heartbeat stays well inside ferryd's stall limit, however short it is set.
  auto stall_limit_ns = static_cast<int64_t>(s.config.scheduler.dispatch_timeout_seconds * 1e9);
  options.rest_sleep_ns = std::clamp<int64_t>(stall_limit_ns / 10, 1'000'000, 100'000'000);
  options.idle_sleep_ns = std::min(options.idle_sleep_ns, options.rest_sleep_ns);
  options.residency = s.residency.get();
  int64_t poll_us = PollMicros(s.config.worker.spin_us);
  options.spin_ns = poll_us * 1000;
  options.spin_iterations = RingChecksFor(poll_us);
  Backend* running = s.backend.get();
  options.loader = [running, dir = s.config.node.model_repository](const std::string& name) {
    LoadedModel loaded;
    Result<Bundle> bundle = LoadRepositoryBundle(dir, name);
    std::optional<Error> failure;
    if (bundle.ok()) {
      loaded.bundle = std::make_unique<Bundle>(std::move(*bundle));
    } else {
      failure = bundle.error();
    }
    loaded.model = MakeLoopModel(name, loaded.bundle.get(), failure, false, *running);
    loaded.spec = SpecForBundle(name, loaded.bundle.get());
    return loaded;
  };
  DispatchLoop loop(*s.segment, args.slot, s.backend.get(), &*s.scheduler, std::move(s.models),
                    options);
  spdlog::info("worker slot {} serving {} models on {}", args.slot, s.scheduler->num_models(),
               s.backend->name());
  return loop.Run();
}

}  // namespace ferry::worker
