// DESIGN: the worker's scheduler, a pure library. No I/O, no threads, no clock: every call
// takes `now`, so the same code runs in the dispatch loop, in tests with a fake clock, and in
// ferry-sim's virtual time.
//
// Each time the GPU frees, the caller asks Next(now), which decides in this order:
//   1. apply pending control commands (set_policy, set_residency, compact);
//   2. dispatch a committed meta sub-call if one is pending (at most one per in-flight meta);
//   3. otherwise select a model by the discipline (fair, fifo or edf) among models with
//      queued work;
//   4. coalesce the winner's queue (batch_planner.h), shedding requests that cannot meet
//      their deadline before any GPU work (expired ones under every discipline; under edf
//      also those whose deadline falls before now + the learned high-percentile cost).
// After the execution the caller reports its compute time with Complete(), which feeds the
// cost model and the fair-share accounting.
//
// fair: start-time fair queueing (Goyal et al., SFQ) over GPU seconds. Each backlogged model
// has a virtual start tag; the model with the smallest tag runs next, and a dispatch that
// costs c seconds advances its model's tag by c / weight (charged at the learned cost when
// dispatched, corrected to the measured time by Complete()). The virtual time V is the start
// tag of the latest dispatch. A model that becomes backlogged (joins, returns from a pause,
// or had served alone) starts at max(its last finish tag, V): it carries no credit from idle
// time and no debt from uncontended use, so nobody is locked out on a transition. Between two
// dispatches of a backlogged model i every other backlogged model j runs at most
// w_j * d_i / w_i + D_j seconds, so i waits at most (W / w_i - 1) d_i + sum_j D_j
// (docs/scheduler.md derives it), provided each Complete() comes before the next Next() of
// the same model (the charge is corrected to the measured time), plus the time of committed
// meta sub-calls, which run ahead of selection. Switching back to fair places every model
// level at the virtual time. Ties: the cheaper next dispatch (coalescing_discount
// applied), then the older front request, then the name.
// With tenants, fair has two levels (fair_shares.h; docs/scheduler.md, "Tenants"): the same
// rule picks the tenant first (tenant weights), then the tenant's model (model weights); the
// dispatch starts with that tenant's request and takes other tenants' only while their tags
// are no later (so batches still mix tenants); charges split by rows. Requests naming no
// tenant are tenant 0, so without tenants the model level alone decides, as described above.
// recent_compute (metrics only) is model i's fraction of recent GPU busy time, decayed with
// half-life ema_halflife_seconds.
//
// Thread safety: requires external synchronization (the dispatch loop owns it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/scheduler_config.h"
#include "worker/scheduler/batch_planner.h"
#include "worker/scheduler/cost_model.h"
#include "worker/scheduler/fair_shares.h"
#include "worker/scheduler/model_queue.h"
#include "worker/scheduler/scheduler_types.h"
#include "worker/scheduler/wait_histogram.h"

namespace ferry {

// Knobs for baselines in benchmarks and tests; production uses the defaults.
struct SchedulerOptions {
  bool coalesce = true;      // false: one request per dispatch (the "no coalescing" baseline).
  bool round_robin = false;  // true: plain round-robin over models with work (baseline).
  // [scheduler.models.NAME] for a model not registered is kept for a later AddModel (a worker
  // following ferryd's model table) instead of refused.
  bool settings_for_later_models = false;
};

// A control command applied at the start of a decision; returned by Next() so the dispatch
// loop carries out what touches the weight cache (residency moves, compaction).
struct SchedulerChange {
  enum class Kind {
    kSetPolicy,
    kSetResidency,
    kCompact,
    kSetDiscipline,
    kSetMaxBatchSize,
    kSetMaxQueueDepth,
    kSetTenantWeight
  };
  Kind kind = Kind::kSetPolicy;
  int model = -1;                             // kSetPolicy, kSetResidency, kSetMaxBatchSize.
  std::optional<int64_t> max_batch_size;      // kSetMaxBatchSize: nullopt = uncapped.
  int64_t max_queue_depth = 0;                // kSetMaxQueueDepth.
  double weight = 0;                          // kSetPolicy, kSetTenantWeight.
  uint32_t tenant = 0;                        // kSetTenantWeight.
  Residency residency = Residency::kWarm;     // kSetResidency.
  std::vector<int> models;                    // kCompact: models to reload afterwards.
  Discipline discipline = Discipline::kFair;  // kSetDiscipline.
};

struct Decision {
  std::vector<SchedulerChange> controls;  // Applied in this decision, in posting order.
  Dispatch dispatch;
};

struct ModelMetrics {
  std::string name;
  uint64_t dispatch_count = 0;  // Executions (a coalesced batch counts once).
  uint64_t requests_served = 0;
  uint64_t rows_served = 0;  // Real rows, padding excluded.
  uint64_t padding_rows = 0;
  double total_compute_seconds = 0;
  double recent_compute = 0;  // Fraction of recent GPU time (fair's EMA), now.
  size_t queue_depth = 0;
  int64_t queue_wait_p50_ns = 0;
  int64_t queue_wait_p99_ns = 0;
  std::map<int64_t, uint64_t> batch_size_histogram;  // Compiled size -> dispatches.
  // Requests dispatched with a queue wait <= kQueueWaitBoundsNs[i] (common/histogram_bounds.h);
  // all of them; the sum.
  std::vector<uint64_t> queue_wait_le;
  uint64_t queue_wait_count = 0;
  int64_t queue_wait_sum_ns = 0;
  int64_t effective_max_batch = 0;
  Residency residency = Residency::kWarm;
  uint64_t rejected = 0;   // Queue full.
  uint64_t over_wait = 0;  // Refused at once: predicted wait past the level's max wait.
  uint64_t shed = 0;       // Dropped for their deadline.
  uint64_t failed = 0;     // Could not run (no compiled program, too many rows).
  uint64_t cancelled = 0;  // Taken out of the queue because their client left.
};

struct ModelControlStatus {
  std::string name;
  double weight = 0;
  size_t queue_depth = 0;
  uint64_t dispatch_count = 0;
  uint64_t requests_served = 0;
  uint64_t rows_served = 0;
  int64_t effective_max_batch = 0;
  std::string wire_batch_input;
  int wire_batch_axis = 0;  // 1-based; 0 = none.
  Residency residency = Residency::kWarm;
};

struct ControlStatus {
  Discipline discipline = Discipline::kFair;
  ResidencyMode residency_mode = ResidencyMode::kManaged;
  std::vector<ModelControlStatus> models;
};

// One warm-up execution: run this (model, variant, size) on zero inputs and SeedCost it.
struct WarmupRun {
  int model;
  int variant;
  int64_t batch_size;
};

class Scheduler {
 public:
  // INVALID_ARGUMENT for an empty model list, duplicate names, bad batch sizes, a
  // [scheduler.models] entry naming no registered model, or settings out of range (the
  // node-file reader checks them too; code-built configs are checked here).
  static Result<Scheduler> Create(SchedulerConfig config, std::vector<ModelSpec> models,
                                  SchedulerOptions options = {});

  // A model loaded on a running worker: the next index (num_models() before the call), with
  // no queue and no history (it joins fair share like a model becoming backlogged).
  // INVALID_ARGUMENT for a name already registered or sizes / variants Create refuses.
  Status AddModel(ModelSpec spec);
  // An unloaded model keeps its index (nothing is queued for it any more) under
  // `placeholder`, so its name may be loaded again at another index.
  void RetireModel(int index, std::string placeholder);

  // Index of the model called `name`, or -1.
  int FindModel(std::string_view name) const;
  const ModelSpec& model(int index) const { return models_[static_cast<size_t>(index)].spec; }
  size_t num_models() const { return models_.size(); }

  // Queues a request. RESOURCE_EXHAUSTED naming the model and depth when its queue is full
  // (other models are unaffected); INVALID_ARGUMENT for an unknown model, a variant out of
  // range or rows < 1.
  Status Enqueue(int model, QueuedRequest request);
  // Queues every piece of a split request, or none: RESOURCE_EXHAUSTED when they do not
  // all fit under max_queue_depth (so no piece burns GPU time for a request that fails), or
  // when their predicted wait passes their level's max wait (RefuseByWait; the message ends
  // with a retry hint, common/result.h).
  // INVALID_ARGUMENT for an empty span. Before refusing for depth, requests of the model
  // whose deadline passed before the new request's arrival (the caller's now) are taken out
  // and shed by the next decision, so they never hold queue places.
  Status EnqueueAll(int model, std::span<const QueuedRequest> pieces);
  // Queues a committed meta sub-call (request.meta_id != 0), dispatched ahead of the
  // discipline scan. INVALID_ARGUMENT when that meta already has one pending, or for the
  // same faults Enqueue refuses.
  Status EnqueueCommitted(int model, QueuedRequest request);
  // Takes request `payload` of model `model` out of its queue (or the committed calls) if it
  // is still there, counting it cancelled; the caller answers it. False when it is not queued
  // (already dispatched, shed, or never queued): it then runs or was answered as usual. A
  // linear scan of the model's queue (cancellations are rare).
  bool Cancel(int model, uint64_t payload);
  // Managed residency mode: the model's residency floor (the node file's level) changed by a
  // reload; applied at the next decision. INVALID_ARGUMENT in external mode (the outside
  // controller owns residency there), NOT_FOUND for an unknown model.
  Status SetResidencyFloor(std::string_view model, Residency residency);
  // Residency (worker/weight_residency.h): a model whose weights are not resident keeps its
  // queue but is never selected, nor its committed sub-calls dispatched, until it is again.
  // Every model starts resident; one coming back starts no earlier than the virtual time (no
  // credit for its time out, as after a pause).
  void SetResident(int model, bool resident);
  bool resident(int model) const { return models_[static_cast<size_t>(model)].resident; }
  // The model whose weights should load now: the backlogged model the discipline would serve
  // first (fair: the smallest start tag; fifo and edf: the oldest front request), when its
  // weights are out. -1 otherwise: no load runs ahead of its model's turn.
  int NextColdLoad() const;
  // Whether Next() has anything to do now: requests queued for a resident model, expired ones
  // to return, or a committed sub-call of a resident model.
  bool HasRunnable() const;
  // Charges a finished weight load to the model's fair share as a dispatch of `seconds`
  // would be (its finish tag advances by seconds / weight; the virtual time stays), so a
  // model that keeps being evicted pays for its loads out of its own share.
  void ChargeLoad(int model, double seconds);
  // Whether meta `meta_id` has a committed sub-call queued (a second one then queues normally).
  bool CommittedPending(uint64_t meta_id) const { return committed_metas_.count(meta_id) != 0; }

  // Control commands: checked now, applied at the start of the next decision.
  // NOT_FOUND for an unknown model; INVALID_ARGUMENT for weight <= 0.
  Status SetPolicy(std::string_view model, double weight);
  // INVALID_ARGUMENT unless residency_mode is external.
  Status SetResidency(std::string_view model, Residency residency);
  Status Compact(const std::vector<std::string>& reload);
  // Switches fair / fifo / edf for the decisions that follow; queued requests stay queued
  // (edf's deadline index is rebuilt from them). Fair's virtual clocks keep running under
  // the other disciplines, so switching back to fair carries the lag bound over.
  Status SetDiscipline(Discipline discipline);
  // A model's cap on rows per dispatch (nullopt: the largest compiled size); never changes
  // compiled shapes or splits a queued request. NOT_FOUND; INVALID_ARGUMENT for a cap < 1.
  Status SetMaxBatchSize(std::string_view model, std::optional<int64_t> cap);
  // A tenant's weight at the tenant level of fair (docs/scheduler.md, "Tenants").
  // INVALID_ARGUMENT for a tenant number >= kMaxSchedulerTenants or weight <= 0.
  Status SetTenantWeight(uint32_t tenant, double weight);
  // Every model's queue limit; requests already queued beyond a lowered limit stay queued
  // (only new ones are refused). INVALID_ARGUMENT for a depth < 1.
  Status SetMaxQueueDepth(int64_t depth);

  // The next decision (see the file comment). A Dispatch that does not run still carries
  // the requests shed or failed in this decision.
  Decision Next(Nanos now);
  // Reports the measured compute seconds of a dispatch that ran (weight-load time
  // excluded). REQUIRES: `dispatch` came from Next() and ran.
  void Complete(const Dispatch& dispatch, double compute_seconds, Nanos now);

  // Warm-up (fair only): the runs that seed every (model, variant, size) pair.
  std::vector<WarmupRun> WarmupPlan() const;
  void SeedCost(int model, int variant, int64_t batch_size, double seconds);
  const CostModel& cost(int model) const { return models_[static_cast<size_t>(model)].cost; }

  std::vector<ModelMetrics> Metrics(Nanos now) const;
  ControlStatus GetControlStatus() const;
  const SchedulerConfig& config() const { return config_; }
  // Requests still to be answered: queued, or expired and waiting to be returned as shed by
  // the next decision. A caller loops on Next() while this is non-zero.
  size_t queued_requests() const { return queued_ + expired_.size() + committed_.size(); }
  size_t queue_depth(int model) const { return models_[static_cast<size_t>(model)].queue.size(); }

 private:
  struct ModelState {
    ModelState(ModelSpec s, double alpha, bool track_deadlines);
    ModelSpec spec;
    double weight;
    Residency residency;
    bool resident = true;  // Weights in memory: selectable.
    ModelQueue queue;
    CostModel cost;
    double recent = 0;  // Decayed compute seconds, scaled to recent_epoch_ (see .cc).
    // No queued request has a deadline before this (a lower bound, exact after a scan), so a
    // full queue looks for expired requests only when one may exist.
    Nanos earliest_deadline = std::numeric_limits<Nanos>::max();
    // EffectiveCost() memo: recomputed only after the queue or the cost model changed, so a
    // decision costs O(1) per idle-since-last-time model rather than a size search each.
    mutable double effective_cost = 0;
    mutable bool effective_cost_stale = true;
    ModelMetrics counters;
    WaitHistogram waits;
    std::vector<uint64_t> size_counts;
  };
  struct Committed {
    int model;
    QueuedRequest request;
  };

  Scheduler(SchedulerConfig config, std::vector<ModelSpec> models, SchedulerOptions options);
  // Enqueue's checks of a request against model `model` (not the queue depth).
  Status CheckRequest(int model, const QueuedRequest& request) const;

  double RecentFraction(const ModelState& m) const;
  void AddRecentCompute(ModelState& m, double seconds, Nanos now);
  // The (variant, compiled size index) of the dispatch model m would run next.
  std::pair<int, int> NextPair(const ModelState& m) const;
  double EffectiveCost(const ModelState& m) const;
  // The learned worst cost (max of recent runs) of the dispatch model m would run next;
  // nullopt while that (variant, size) has never been measured.
  std::optional<double> NextDispatchCost(const ModelState& m) const;
  // SetResidency and SetResidencyFloor once their mode is checked: `model` found, the level
  // queued for the next decision.
  Status QueueResidency(std::string_view what, std::string_view model, Residency residency);
  // fair: the tenant with the smallest start tag among those with a resident backlogged
  // model, then that tenant's resident model with the smallest flow tag (-1: none). With
  // `any_residency`, models out of memory count too (the next cold load).
  int SelectFair(uint32_t* tenant, bool any_residency = false) const;
  int SelectFifo() const;
  int SelectEdf(Nanos now) const;
  int SelectRoundRobin();
  // The model to serve and (fair) the tenant it is served for; other disciplines serve the
  // model's front request's tenant.
  int Select(Nanos now, uint32_t* tenant);
  // fair: the tenants whose requests may join a dispatch of `model` chosen for `tenant`:
  // `tenant`, and each other tenant whose start tag is at most its and whose flow at `model`
  // is its own next choice, so a filler is charged only where selection would have served it
  // (docs/scheduler.md derives the bound from this). Other disciplines: every tenant.
  uint64_t FillerTenants(uint32_t tenant, int model) const;
  // Coalesces model `index` for `tenant` (its oldest most urgent request first), shedding
  // infeasible requests first. Fills `out`.
  void Coalesce(int index, uint32_t tenant, Nanos now, Dispatch* out);
  // fair: tenant `tenant`'s backlogged model with the smallest flow tag (ties: the cheaper
  // next dispatch, the older front request, the name; with `any_residency` models out of
  // memory count too and ties go by age); -1 when none is resident.
  int BestModelOf(uint32_t tenant, bool any_residency) const;
  // fair: the request that leads tenant `tenant`'s dispatch of model `index`: its most urgent,
  // oldest request, or, when lower_level_share says it is the lower levels' turn, its oldest
  // request of a less urgent level (counted in the flow's urgent_run). nullopt: none queued.
  std::optional<size_t> LeadOf(int index, uint32_t tenant);
  // Moves the planned requests of model `index` into `out`.
  void TakePlanned(int index, const BatchPlan& plan, Dispatch* out);
  static bool Older(const ModelState& a, const ModelState& b);
  // fair: tenant `tenant`'s guaranteed fraction of GPU time at `model` with the backlogs of
  // now (its flow counted as backlogged): (w_t / W_T) (w_m / W_t).
  double FlowShare(uint32_t tenant, int model) const;
  // Admission by predicted wait (fair, a level with max_wait_seconds, a measured cost): the
  // refusal for `pieces` when the work queued ahead of them in their flow, at their level or a
  // more urgent one, served at the flow's share, plus one dispatch in service, passes the
  // level's max wait. nullopt: admitted.
  std::optional<Error> RefuseByWait(int model, std::span<const QueuedRequest> pieces) const;
  // Bookkeeping for a request that left model `index`'s queue.
  void Left(int index, const QueuedRequest& request) { shares_.Count(index, request, -1); }
  // Charges a dispatch that ran to the tenants whose requests it carried, by rows.
  void ChargeShares(const ModelState& m, Dispatch& d);
  void DispatchCommitted(Nanos now, Dispatch* out);
  void Activate(int index);
  void DeactivateIfEmpty(int index);
  void RecordDispatched(ModelState& m, Dispatch& d, Nanos now);
  // Takes out the model's requests whose deadline is at or before `now` (into expired_).
  void DropExpired(int index, Nanos now);

  SchedulerConfig config_;
  SchedulerOptions options_;
  std::vector<ModelState> models_;
  std::vector<int> active_;       // Models with queued requests, unordered.
  std::vector<int> active_slot_;  // Position in active_, or -1.
  std::vector<Committed> committed_;
  std::set<uint64_t> committed_metas_;
  std::vector<SchedulerChange> pending_controls_;
  double total_recent_ = 0;  // Sum of every model's `recent`, on the same scale.
  FairShares shares_;        // fair's tags, by tenant and by (tenant, model).
  // Requests whose deadline passed while queued, taken out when a full queue needed room;
  // returned as shed by the next decision.
  std::vector<std::pair<int, QueuedRequest>> expired_;
  Nanos recent_epoch_ = 0;
  size_t round_robin_next_ = 0;
  size_t queued_ = 0;
};

}  // namespace ferry
