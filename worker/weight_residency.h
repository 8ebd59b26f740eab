// DESIGN: a worker's weight budget in action (the seed's On-demand Weights; Clockwork, OSDI
// '20). The WeightCache decides which models' weights may be in memory (floors, LRU, the
// budget); this class makes the backend follow it without stopping the dispatch loop:
//   - a model evicted by the cache leaves the scheduler's choice at once, and its weights
//     are released as soon as no batch of it is planned or executing;
//   - a cold load runs on a loader thread of its own (one at a time) while the loop keeps
//     serving resident models, and starts only once every release it made room with is done,
//     so the weights in memory never exceed the budget (plus nothing: the loader builds into
//     memory the releases freed);
//   - when the loader is idle, the scheduler names the backlogged model to load next
//     (Scheduler::NextColdLoad), and a finished load is charged to that model's fair share
//     (Scheduler::ChargeLoad) before it becomes selectable again.
// Models are added in index order after the backend loaded them (weights in memory, warmed
// up): pinned ones stay (all pinned models must fit together), warm ones stay while they fit,
// on_demand ones are released at once and load at their first dispatch.
//
// Thread safety: the loop's thread calls everything; only the backend's RestoreWeights runs
// on the loader thread, and `notify` is called from there when a load finishes.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "worker/backends/backend.h"
#include "worker/backends/execution_thread.h"
#include "worker/backends/weight_cache.h"
#include "worker/scheduler/scheduler.h"

namespace ferry::worker {

// One model's residency, for the status snapshot and /metrics.
struct ResidencyCounters {
  bool resident = true;  // Weights in memory and usable.
  uint64_t bytes = 0;    // What its weights take when resident.
  uint64_t loads = 0;    // Cold loads finished (not counting the load at start).
  uint64_t evictions = 0;
  double load_seconds = 0;   // Summed over `loads`.
  int64_t last_load_ns = 0;  // CLOCK_MONOTONIC when the last cold load finished (0: never).
};

struct ResidencyOptions {
  uint64_t budget = 0;  // Bytes of weights resident at once.
  ResidencyMode mode = ResidencyMode::kManaged;
  bool evict_all = false;  // Every cold load first evicts every non-pinned model (baseline).
  // Cold loads take at most this fraction of the time: after a load of L seconds the next
  // starts no sooner than L (1 - f) / f later. (0, 1].
  double max_load_fraction = 1.0;
};

// The budget a worker runs under: `configured` ([worker] weight_budget; 0: unset), else
// `most`, what the backend holds (Backend::DefaultWeightBudget: a GPU's weight arena; 0: no
// limit); a configured budget above a nonzero `most` is clamped to it. 0: no budget, every
// model stays resident.
uint64_t ChooseWeightBudget(uint64_t configured, uint64_t most);

class WeightResidency {
 public:
  // REQUIRES: backend->SupportsResidency(); backend and scheduler outlive this object.
  // Nothing fragments a budget of heap bytes, so the cache never compacts by itself here.
  WeightResidency(Backend* backend, Scheduler* scheduler, ResidencyOptions options,
                  std::function<void()> notify);
  ~WeightResidency();  // Waits for a load in flight.
  WeightResidency(const WeightResidency&) = delete;
  WeightResidency& operator=(const WeightResidency&) = delete;

  // Model `index` (the scheduler's number; indices added in order, gaps for models without
  // weights on this worker allowed), its weights in memory: kept or released by `floor`.
  // RESOURCE_EXHAUSTED naming the sizes when its weights exceed the budget, alone or beside
  // the pinned models: its weights are then released and the caller fails the model.
  Status Add(int index, const std::string& name, ModelHandle handle, Residency floor);
  // An unloaded model (the backend freed it): its bytes leave the budget.
  // REQUIRES: !loading().
  void Remove(int index);
  // One step per loop turn: takes a finished load, carries out releases of models with no
  // batch planned or executing (`busy`), and, when `may_start` (no model-table change waits
  // for the loader to be idle), starts the next load. A model that cannot be made
  // resident (its load failed, or it no longer fits beside the pinned models) is returned
  // with the error, for the loop to fail it; it is then marked resident for the scheduler so
  // its queued requests drain through the failure.
  std::vector<std::pair<int, Error>> Turn(const std::function<bool(int)>& busy, bool may_start);
  // A dispatch of `index`: most recently used (and, if it was loaded last, the next load may
  // start).
  void Touch(int index);
  // ferryctl set-residency, or a reload changing the floor: pinned and warm load now,
  // on_demand releases now.
  Status SetFloor(int index, Residency floor);
  // ferryctl compact: every non-pinned model released (its memory returned to the system),
  // then those that were resident (or `reload`, when given) built again, least recently used
  // first, into fresh memory.
  Status Compact(const std::vector<int>& reload);

  bool loading() const { return loading_ >= 0; }
  // A load finished on the loader thread and waits for Turn.
  bool LoadFinished() const { return loading() && loader_.Ready(); }
  bool resident(int index) const;
  const ResidencyCounters& counters(int index) const;
  uint64_t budget() const { return cache_.capacity(); }
  uint64_t resident_bytes() const { return cache_.capacity() - cache_.free_bytes(); }
  uint64_t cold_loads() const { return cold_loads_; }
  // Nanoseconds from `now` until max_load_fraction lets the next load start (0: it may).
  int64_t LoadDelayNs(int64_t now) const { return std::max<int64_t>(0, next_load_ns_ - now); }

 private:
  struct Model {
    ModelHandle handle = -1;
    bool registered = false;
    bool in_memory = false;        // The backend holds its weights (or is building them).
    bool release_pending = false;  // Evicted by the cache; the backend still holds them.
    ResidencyCounters counters;
  };
  Model& At(int index);
  // The cache's callbacks: room was made for the model, or it was evicted.
  Status QueueLoad(int index);
  void QueueRelease(int index);
  void FinishLoad(std::vector<std::pair<int, Error>>* unservable);
  void ReleaseIdle(const std::function<bool(int)>& busy);
  void StartLoad(std::vector<std::pair<int, Error>>* unservable);
  void Unservable(int index, Error error, std::vector<std::pair<int, Error>>* out);

  Backend* backend_;
  Scheduler* scheduler_;
  std::function<void()> notify_;
  ByteBudget arena_;
  WeightCache cache_;
  std::vector<Model> models_;
  std::deque<int> pending_loads_;  // Room made, not started.
  // The loader thread: one RestoreWeights at a time (its timing's load_seconds).
  ExecutionThread loader_;
  int loading_ = -1;         // The model on the loader thread.
  bool compacting_ = false;  // Inside Compact: evicted models are rebuilt, not kept.
  int fresh_ = -1;  // Loaded last and not dispatched since: no other load starts meanwhile.
  ResidencyOptions options_;
  int64_t next_load_ns_ = 0;  // CLOCK_MONOTONIC: no load starts before.
  uint64_t cold_loads_ = 0;
};

}  // namespace ferry::worker
