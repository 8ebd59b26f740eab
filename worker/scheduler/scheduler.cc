// The scheduler's models and requests: registration, admission, cancels, live settings,
// warm-up and metrics. Which model runs next is scheduler_select.cc.
#include "worker/scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/histogram_bounds.h"

namespace ferry {

Scheduler::ModelState::ModelState(ModelSpec s, double alpha, bool track_deadlines)
    : spec(std::move(s)),
      weight(spec.config.weight),
      residency(spec.config.residency),
      queue(track_deadlines),
      cost(spec.num_variants, static_cast<int>(spec.batch_sizes.size()), alpha),
      size_counts(spec.batch_sizes.size(), 0) {
  counters.name = spec.name;
}

namespace {

// Checks a model's sizes and variants; fills its configuration from `config`.
Status PrepareSpec(const SchedulerConfig& config, ModelSpec* spec) {
  const std::vector<int64_t>& sizes = spec->batch_sizes;
  bool unbatched = sizes == std::vector<int64_t>{0};
  bool ascending = !sizes.empty() && sizes[0] > 0 &&
                   std::adjacent_find(sizes.begin(), sizes.end(),
                                      [](int64_t a, int64_t b) { return a >= b; }) == sizes.end();
  if (!unbatched && !ascending) {
    return InvalidArgument("scheduler: model '" + spec->name +
                           "': batch sizes must be ascending positive, or [0]");
  }
  if (spec->num_variants < 1) {
    return InvalidArgument("scheduler: model '" + spec->name + "': no shape variants");
  }
  if (unbatched) {
    spec->coalescable = false;
  }
  spec->config = config.ForModel(spec->name);
  return OkStatus();
}

}  // namespace

Status Scheduler::AddModel(ModelSpec spec) {
  if (FindModel(spec.name) >= 0) {
    return InvalidArgument("scheduler: model '" + spec.name + "' registered twice");
  }
  FERRY_RETURN_IF_ERROR(PrepareSpec(config_, &spec));
  models_.emplace_back(std::move(spec), config_.cost_ema_alpha,
                       config_.discipline == Discipline::kEdf);
  active_slot_.push_back(-1);
  return OkStatus();
}

void Scheduler::RetireModel(int index, std::string placeholder) {
  models_[static_cast<size_t>(index)].spec.name = std::move(placeholder);
}

Result<Scheduler> Scheduler::Create(SchedulerConfig config, std::vector<ModelSpec> models,
                                    SchedulerOptions options) {
  if (models.empty()) {
    return InvalidArgument("scheduler: no models registered");
  }
  auto in = [](double x, double lo, double hi) { return std::isfinite(x) && x > lo && x <= hi; };
  if (!in(config.ema_halflife_seconds, 0, 1e9) || !in(config.recency_penalty_cap, 0, 1) ||
      !in(config.cost_ema_alpha, 0, 1) || !(config.coalescing_discount >= 0) ||
      !(config.coalescing_discount < 1) || config.max_queue_depth < 1 ||
      !(config.lower_level_share >= 0 && config.lower_level_share <= 0.5)) {
    return InvalidArgument("scheduler: settings out of range (see docs/configuration.md)");
  }
  for (const auto& [tenant, weight] : config.tenant_weights) {
    if (tenant >= kMaxSchedulerTenants || !in(weight, 0, 1e12)) {
      return InvalidArgument("scheduler: tenant " + std::to_string(tenant) +
                             ": number < 64 and a finite weight > 0 needed");
    }
  }
  for (const auto& [name, model] : config.models) {
    if (!in(model.weight, 0, 1e12) || (model.max_batch_size && *model.max_batch_size < 1)) {
      return InvalidArgument("scheduler.models." + name +
                             ": weight must be finite and > 0, max_batch_size >= 1");
    }
  }
  std::set<std::string> names;
  std::set<std::string> covered;
  for (ModelSpec& spec : models) {
    if (!names.insert(spec.name).second) {
      return InvalidArgument("scheduler: model '" + spec.name + "' registered twice");
    }
    covered.insert(std::string(ModelKeyName(spec.name)));  // A name's settings: its versions.
    FERRY_RETURN_IF_ERROR(PrepareSpec(config, &spec));
  }
  for (const auto& [name, unused] : config.models) {
    if (names.count(name) == 0 && covered.count(name) == 0 && !options.settings_for_later_models) {
      return InvalidArgument("scheduler.models." + name + ": no such model is loaded");
    }
  }
  return Scheduler(std::move(config), std::move(models), options);
}

Scheduler::Scheduler(SchedulerConfig config, std::vector<ModelSpec> models,
                     SchedulerOptions options)
    : config_(std::move(config)), options_(options) {
  models_.reserve(models.size());
  for (ModelSpec& spec : models) {
    models_.emplace_back(std::move(spec), config_.cost_ema_alpha,
                         config_.discipline == Discipline::kEdf);
  }
  active_slot_.assign(models_.size(), -1);
  for (const auto& [tenant, weight] : config_.tenant_weights) {
    shares_.SetTenantWeight(tenant, weight);
  }
}

int Scheduler::FindModel(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].spec.name == name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Status Scheduler::CheckRequest(int model, const QueuedRequest& request) const {
  if (model < 0 || static_cast<size_t>(model) >= models_.size()) {
    return InvalidArgument("scheduler: no model with index " + std::to_string(model));
  }
  const ModelState& m = models_[static_cast<size_t>(model)];
  if (request.rows < 1) {
    return InvalidArgument("model '" + m.spec.name + "': a request needs at least one row");
  }
  if (request.priority < kHighestPriority || request.priority > kLowestPriority) {
    return InvalidArgument("model '" + m.spec.name + "': priority " +
                           std::to_string(request.priority) + " is not a level (" +
                           std::to_string(kHighestPriority) + ".." +
                           std::to_string(kLowestPriority) + ")");
  }
  if (request.tenant >= kMaxSchedulerTenants) {
    return InvalidArgument("model '" + m.spec.name + "': tenant number " +
                           std::to_string(request.tenant) + " is out of range");
  }
  if (request.variant != kNoCompiledProgram &&
      (request.variant < 0 || request.variant >= m.spec.num_variants)) {
    return InvalidArgument("model '" + m.spec.name + "': no shape variant " +
                           std::to_string(request.variant));
  }
  return OkStatus();
}

Status Scheduler::Enqueue(int model, QueuedRequest request) {
  return EnqueueAll(model, std::span<const QueuedRequest>(&request, 1));
}

Status Scheduler::EnqueueAll(int model, std::span<const QueuedRequest> pieces) {
  if (pieces.empty()) {
    return InvalidArgument("scheduler: EnqueueAll needs at least one piece");
  }
  for (const QueuedRequest& piece : pieces) {
    FERRY_RETURN_IF_ERROR(CheckRequest(model, piece));
  }
  ModelState& m = models_[static_cast<size_t>(model)];
  if (m.queue.size() + pieces.size() > static_cast<size_t>(config_.max_queue_depth)) {
    DropExpired(model, pieces.front().arrival);
  }
  if (m.queue.size() + pieces.size() > static_cast<size_t>(config_.max_queue_depth)) {
    ++m.counters.rejected;
    return ResourceExhausted("model '" + m.spec.name + "': queue is full (max_queue_depth " +
                             std::to_string(config_.max_queue_depth) + ")");
  }
  if (std::optional<Error> refusal = RefuseByWait(model, pieces)) {
    ++m.counters.over_wait;
    return *refusal;
  }
  for (const QueuedRequest& piece : pieces) {
    if (piece.deadline) {
      m.earliest_deadline = std::min(m.earliest_deadline, *piece.deadline);
    }
    m.queue.Push(piece);
    shares_.Count(model, piece, 1);
  }
  m.effective_cost_stale = true;
  queued_ += pieces.size();
  Activate(model);
  return OkStatus();
}

Status Scheduler::EnqueueCommitted(int model, QueuedRequest request) {
  FERRY_RETURN_IF_ERROR(CheckRequest(model, request));
  if (request.meta_id == 0) {
    return InvalidArgument("scheduler: a committed sub-call needs a meta id");
  }
  if (!committed_metas_.insert(request.meta_id).second) {
    return InvalidArgument("scheduler: meta " + std::to_string(request.meta_id) +
                           " already has a committed sub-call pending");
  }
  committed_.push_back({model, std::move(request)});
  return OkStatus();
}

bool Scheduler::Cancel(int model, uint64_t payload) {
  if (model < 0 || static_cast<size_t>(model) >= models_.size()) {
    return false;
  }
  ModelState& m = models_[static_cast<size_t>(model)];
  if (std::optional<size_t> at = m.queue.Find(payload)) {
    Left(model, m.queue.RemoveAt(*at));
    m.effective_cost_stale = true;
    --queued_;
    DeactivateIfEmpty(model);
    ++m.counters.cancelled;
    return true;
  }
  for (auto it = committed_.begin(); it != committed_.end(); ++it) {
    if (it->model == model && it->request.payload == payload) {
      committed_metas_.erase(it->request.meta_id);
      committed_.erase(it);
      ++m.counters.cancelled;
      return true;
    }
  }
  return false;
}

Status Scheduler::SetPolicy(std::string_view model, double weight) {
  int index = FindModel(model);
  if (index < 0) {
    return NotFound("set_policy: no model '" + std::string(model) + "'");
  }
  if (!(weight > 0) || !std::isfinite(weight)) {
    return InvalidArgument("set_policy: weight of '" + std::string(model) + "' must be > 0");
  }
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kSetPolicy;
  command.model = index;
  command.weight = weight;
  pending_controls_.push_back(command);
  return OkStatus();
}

Status Scheduler::SetMaxBatchSize(std::string_view model, std::optional<int64_t> cap) {
  int index = FindModel(model);
  if (index < 0) {
    return NotFound("set_max_batch_size: no model '" + std::string(model) + "'");
  }
  if (cap && *cap < 1) {
    return InvalidArgument("set_max_batch_size: the cap of '" + std::string(model) +
                           "' must be >= 1");
  }
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kSetMaxBatchSize;
  command.model = index;
  command.max_batch_size = cap;
  pending_controls_.push_back(command);
  return OkStatus();
}

Status Scheduler::SetMaxQueueDepth(int64_t depth) {
  if (depth < 1) {
    return InvalidArgument("set_max_queue_depth: depth must be >= 1");
  }
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kSetMaxQueueDepth;
  command.max_queue_depth = depth;
  pending_controls_.push_back(command);
  return OkStatus();
}

Status Scheduler::SetResidency(std::string_view model, Residency residency) {
  if (config_.residency_mode != ResidencyMode::kExternal) {
    return InvalidArgument(
        "set_residency: only in residency_mode = \"external\"; this worker "
        "manages residency itself");
  }
  return QueueResidency("set_residency", model, residency);
}

Status Scheduler::SetResidencyFloor(std::string_view model, Residency residency) {
  if (config_.residency_mode != ResidencyMode::kManaged) {
    return InvalidArgument("residency floor: only in residency_mode = \"managed\"");
  }
  return QueueResidency("residency floor", model, residency);
}

Status Scheduler::QueueResidency(std::string_view what, std::string_view model,
                                 Residency residency) {
  int index = FindModel(model);
  if (index < 0) {
    return NotFound(std::string(what) + ": no model '" + std::string(model) + "'");
  }
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kSetResidency;
  command.model = index;
  command.residency = residency;
  pending_controls_.push_back(command);
  return OkStatus();
}

Status Scheduler::Compact(const std::vector<std::string>& reload) {
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kCompact;
  for (const std::string& name : reload) {
    int index = FindModel(name);
    if (index < 0) {
      return NotFound("compact: no model '" + name + "'");
    }
    command.models.push_back(index);
  }
  pending_controls_.push_back(command);
  return OkStatus();
}

Status Scheduler::SetDiscipline(Discipline discipline) {
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kSetDiscipline;
  command.discipline = discipline;
  pending_controls_.push_back(command);
  return OkStatus();
}

std::vector<WarmupRun> Scheduler::WarmupPlan() const {
  std::vector<WarmupRun> runs;
  if (config_.discipline != Discipline::kFair) {
    return runs;
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    for (int v = 0; v < models_[i].spec.num_variants; ++v) {
      for (int64_t size : models_[i].spec.batch_sizes) {
        runs.push_back({static_cast<int>(i), v, size});
      }
    }
  }
  return runs;
}

void Scheduler::SeedCost(int model, int variant, int64_t batch_size, double seconds) {
  ModelState& m = models_[static_cast<size_t>(model)];
  std::optional<int> size_index = SmallestFitting(m.spec.batch_sizes, batch_size);
  if (size_index && variant >= 0 && variant < m.spec.num_variants && std::isfinite(seconds) &&
      seconds >= 0) {
    m.effective_cost_stale = true;
    m.cost.Record(variant, *size_index, seconds);
  }
}

std::vector<ModelMetrics> Scheduler::Metrics(Nanos now) const {
  std::vector<ModelMetrics> out;
  for (const ModelState& m : models_) {
    ModelMetrics metrics = m.counters;
    metrics.recent_compute = RecentFraction(m);
    metrics.queue_depth = m.queue.size();
    metrics.queue_wait_p50_ns = m.waits.Percentile(0.50);
    metrics.queue_wait_p99_ns = m.waits.Percentile(0.99);
    metrics.queue_wait_le = m.waits.CountsAtMost(kQueueWaitBoundsNs);
    metrics.queue_wait_count = m.waits.count();
    metrics.queue_wait_sum_ns = m.waits.sum_ns();
    for (size_t i = 0; i < m.spec.batch_sizes.size(); ++i) {
      if (m.size_counts[i] > 0) {
        metrics.batch_size_histogram[m.spec.batch_sizes[i]] = m.size_counts[i];
      }
    }
    metrics.effective_max_batch = EffectiveMaxBatch(m.spec);
    metrics.residency = m.residency;
    out.push_back(std::move(metrics));
  }
  return out;
}

ControlStatus Scheduler::GetControlStatus() const {
  ControlStatus status;
  status.discipline = config_.discipline;
  status.residency_mode = config_.residency_mode;
  for (const ModelState& m : models_) {
    ModelControlStatus s;
    s.name = m.spec.name;
    s.weight = m.weight;
    s.queue_depth = m.queue.size();
    s.dispatch_count = m.counters.dispatch_count;
    s.requests_served = m.counters.requests_served;
    s.rows_served = m.counters.rows_served;
    s.effective_max_batch = EffectiveMaxBatch(m.spec);
    s.wire_batch_input = m.spec.wire_batch_input;
    s.wire_batch_axis = m.spec.wire_batch_axis;
    s.residency = m.residency;
    status.models.push_back(std::move(s));
  }
  return status;
}

}  // namespace ferry
