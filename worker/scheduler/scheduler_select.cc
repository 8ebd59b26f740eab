// The scheduler's decision: expiry, which model runs next (fair, FIFO, EDF, round robin),
// the batch it coalesces, and the costs that completions teach it.
#include <algorithm>
#include <cmath>
#include <set>

#include "common/histogram_bounds.h"
#include "worker/scheduler/scheduler.h"

namespace ferry {

bool Scheduler::Older(const ModelState& a, const ModelState& b) {
  if (a.queue.oldest_arrival() != b.queue.oldest_arrival()) {
    return a.queue.oldest_arrival() < b.queue.oldest_arrival();
  }
  return a.spec.name < b.spec.name;
}

void Scheduler::DropExpired(int index, Nanos now) {
  ModelState& m = models_[static_cast<size_t>(index)];
  if (m.earliest_deadline > now) {
    return;  // Nothing queued can have expired.
  }
  std::vector<QueuedRequest> expired;
  m.earliest_deadline = m.queue.RemoveExpired(now, &expired);
  for (QueuedRequest& r : expired) {
    Left(index, r);
    expired_.emplace_back(index, r);
  }
  queued_ -= expired.size();
  m.counters.shed += expired.size();
  m.effective_cost_stale = true;
  DeactivateIfEmpty(index);
}

void Scheduler::Activate(int index) {
  if (active_slot_[static_cast<size_t>(index)] < 0) {
    active_slot_[static_cast<size_t>(index)] = static_cast<int>(active_.size());
    active_.push_back(index);
  }
}

void Scheduler::DeactivateIfEmpty(int index) {
  int slot = active_slot_[static_cast<size_t>(index)];
  if (slot < 0 || !models_[static_cast<size_t>(index)].queue.empty()) {
    return;
  }
  int last = active_.back();
  active_[static_cast<size_t>(slot)] = last;
  active_slot_[static_cast<size_t>(last)] = slot;
  active_.pop_back();
  active_slot_[static_cast<size_t>(index)] = -1;
}

double Scheduler::RecentFraction(const ModelState& m) const {
  // Every model's compute decays by the same factor, so the fraction needs no decay: the
  // common factor 2^(-(now - epoch) / halflife) cancels.
  return total_recent_ > 0 ? m.recent / total_recent_ : 0.0;
}

std::pair<int, int> Scheduler::NextPair(const ModelState& m) const {
  const QueuedRequest& front = m.queue.front();
  int variant = front.variant == kNoCompiledProgram ? 0 : front.variant;
  // The size the next dispatch would run at: the front variant's queued rows up to the cap,
  // at the smallest compiled size holding them (the planner's rule, from running counts).
  int64_t limit = EffectiveMaxBatch(m.spec);
  int64_t rows = std::max(front.rows, std::min(m.queue.variant_rows(variant), limit));
  int size_index = SmallestFitting(m.spec.batch_sizes, rows)
                       .value_or(static_cast<int>(m.spec.batch_sizes.size()) - 1);
  return {variant, size_index};
}

double Scheduler::EffectiveCost(const ModelState& m) const {
  if (!m.effective_cost_stale) {
    return m.effective_cost;
  }
  m.effective_cost_stale = false;
  const QueuedRequest& front = m.queue.front();
  int64_t limit = EffectiveMaxBatch(m.spec);
  auto [variant, size_index] = NextPair(m);
  double cost = m.cost.Estimate(variant, size_index);
  // Discounted only when the next dispatch would really take a second request.
  if (m.spec.coalescable && options_.coalesce && m.queue.size() > 1 &&
      m.queue.at(1).variant == front.variant && front.rows + m.queue.at(1).rows <= limit) {
    cost *= 1.0 - config_.coalescing_discount;
  }
  cost = std::max(cost, 1e-9);  // A zero learned cost must not divide by zero.
  m.effective_cost = cost;
  return cost;
}

int Scheduler::SelectFifo() const {
  int best = -1;
  for (int index : active_) {
    const ModelState& m = models_[static_cast<size_t>(index)];
    if (!m.resident) {
      continue;
    }
    if (best < 0 || Older(m, models_[static_cast<size_t>(best)])) {
      best = index;
    }
  }
  return best;
}

int Scheduler::SelectEdf(Nanos now) const {
  int best = -1;
  std::optional<Nanos> best_deadline;
  auto more_urgent = [&](const ModelState& m, std::optional<Nanos> deadline, int other,
                         std::optional<Nanos> other_deadline) {
    if (other < 0) {
      return true;
    }
    if (deadline.has_value() != other_deadline.has_value()) {
      return deadline.has_value();  // Any deadline is more urgent than none.
    }
    if (deadline && *deadline != *other_deadline) {
      return *deadline < *other_deadline;
    }
    return Older(m, models_[static_cast<size_t>(other)]);
  };
  for (int index : active_) {
    const ModelState& m = models_[static_cast<size_t>(index)];
    if (!m.resident) {
      continue;
    }
    std::optional<Nanos> deadline = m.queue.MostUrgentDeadline(now);
    if (more_urgent(m, deadline, best, best_deadline)) {
      best = index;
      best_deadline = deadline;
    }
  }
  if (best < 0 || !best_deadline || !options_.coalesce) {
    return best;
  }
  // Batching-aware: the most urgent model may wait for more requests when it cannot fill half
  // its cap and, run at its cap later (learned worst cost), it still meets its most urgent
  // deadline after another model's next dispatch. Then the most urgent model whose next
  // dispatch fits in that slack runs first. Re-judged every decision, so the waiting model
  // runs as soon as its slack no longer covers another dispatch.
  // Only on measured costs, and only when everything queued would run in one dispatch of one
  // variant (so the most urgent request is in it): a guess must not make a request late.
  const ModelState& u = models_[static_cast<size_t>(best)];
  int64_t cap = EffectiveMaxBatch(u.spec);
  int variant = u.queue.front().variant;
  if (!u.spec.coalescable || cap == 0 || variant == kNoCompiledProgram ||
      u.queue.variant_rows(variant) != u.queue.queued_rows() || u.queue.queued_rows() * 2 >= cap ||
      !committed_.empty()) {
    return best;
  }
  std::optional<int> cap_index = SmallestFitting(u.spec.batch_sizes, cap);
  std::optional<int> now_index = SmallestFitting(u.spec.batch_sizes, u.queue.queued_rows());
  if (!cap_index || !now_index || !u.cost.Seeded(variant, *cap_index) ||
      !u.cost.Seeded(variant, *now_index)) {
    return best;
  }
  double own = std::max(u.cost.HighPercentile(variant, *cap_index),
                        u.cost.HighPercentile(variant, *now_index));
  double slack = static_cast<double>(*best_deadline - now) / kNanosPerSecond - own;
  int alternative = -1;
  std::optional<Nanos> alternative_deadline;
  for (int index : active_) {
    const ModelState& m = models_[static_cast<size_t>(index)];
    if (index == best || !m.resident) {
      continue;
    }
    std::optional<double> cost = NextDispatchCost(m);
    if (!cost || *cost > slack) {
      continue;  // Unmeasured, or too long to fit in the slack.
    }
    std::optional<Nanos> deadline = m.queue.MostUrgentDeadline(now);
    if (more_urgent(m, deadline, alternative, alternative_deadline)) {
      alternative = index;
      alternative_deadline = deadline;
    }
  }
  return alternative >= 0 ? alternative : best;
}

std::optional<double> Scheduler::NextDispatchCost(const ModelState& m) const {
  auto [variant, size_index] = NextPair(m);
  return m.cost.MeasuredHigh(variant, size_index);
}

int Scheduler::SelectRoundRobin() {
  for (size_t step = 0; step < models_.size(); ++step) {
    size_t index = (round_robin_next_ + step) % models_.size();
    if (!models_[index].queue.empty() && models_[index].resident) {
      round_robin_next_ = index + 1;
      return static_cast<int>(index);
    }
  }
  return -1;
}

int Scheduler::Select(Nanos now, uint32_t* tenant) {
  if (active_.empty()) {
    return -1;
  }
  int index = -1;
  if (options_.round_robin) {
    index = SelectRoundRobin();
  } else if (config_.discipline == Discipline::kFair) {
    return SelectFair(tenant);
  } else if (config_.discipline == Discipline::kFifo) {
    index = SelectFifo();
  } else {
    index = SelectEdf(now);
  }
  if (index >= 0) {
    *tenant = models_[static_cast<size_t>(index)].queue.front().tenant;
  }
  return index;
}

void Scheduler::Coalesce(int index, uint32_t tenant, Nanos now, Dispatch* out) {
  ModelState& m = models_[static_cast<size_t>(index)];
  m.effective_cost_stale = true;
  out->model = index;
  bool laxity = config_.discipline == Discipline::kEdf;
  auto shed = [&](QueuedRequest r) {
    Left(index, r);
    out->shed.push_back(r);
    --queued_;
    ++m.counters.shed;
  };
  // Requests at the front whose deadline has passed go first, one cheap pop each (under
  // overload most shed requests are these; planning around them would re-plan per batch).
  while (!m.queue.empty() && m.queue.front().deadline && *m.queue.front().deadline <= now) {
    shed(m.queue.PopFront());
  }
  uint64_t fillers = FillerTenants(tenant, index);
  // fifo, edf and round robin serve the queue's front, whoever's it is.
  bool by_tenant = config_.discipline == Discipline::kFair && !options_.round_robin;
  while (!m.queue.empty()) {
    // fair: the dispatch is the chosen tenant's, and its first request leads (nothing runs
    // when shedding took all of them; the caller asks again).
    if (by_tenant) {
      std::optional<size_t> lead = LeadOf(index, tenant);
      if (!lead) {
        break;
      }
      m.queue.MoveToFront(*lead);
    }
    BatchPlan plan =
        PlanBatch(m.queue, m.spec, m.cost, config_.batch_sizing, options_.coalesce, fillers);
    if (plan.failure) {
      Left(index, m.queue.front());
      out->failed.push_back(m.queue.PopFront());
      out->failure = plan.failure;
      --queued_;
      ++m.counters.failed;
      break;
    }
    // Shed the planned requests that cannot meet their deadline; re-plan if any went.
    double high = m.cost.HighPercentile(m.queue.front().variant, plan.size_index);
    Nanos finish = now + static_cast<Nanos>(high * kNanosPerSecond);
    size_t shed_before = out->shed.size();
    for (size_t k = plan.picks.size(); k-- > 0;) {
      size_t i = plan.picks[k];
      const QueuedRequest& r = m.queue.at(i);
      if (r.deadline && (*r.deadline <= now || (laxity && *r.deadline < finish))) {
        shed(m.queue.RemoveAt(i));
      }
    }
    if (out->shed.size() != shed_before) {
      std::reverse(out->shed.begin() + static_cast<std::ptrdiff_t>(shed_before), out->shed.end());
      continue;
    }
    TakePlanned(index, plan, out);
    break;
  }
  DeactivateIfEmpty(index);
}

void Scheduler::TakePlanned(int index, const BatchPlan& plan, Dispatch* out) {
  ModelState& m = models_[static_cast<size_t>(index)];
  out->variant = m.queue.front().variant;
  out->batch_size = plan.batch_size;
  out->rows = plan.rows;
  out->requests.reserve(plan.count);
  if (plan.picks.back() + 1 == plan.picks.size()) {  // A prefix: the common case.
    for (size_t i = 0; i < plan.count; ++i) {
      out->requests.push_back(m.queue.PopFront());
    }
  } else {
    for (size_t k = plan.picks.size(); k-- > 0;) {
      out->requests.push_back(m.queue.RemoveAt(plan.picks[k]));
    }
    std::reverse(out->requests.begin(), out->requests.end());
  }
  for (const QueuedRequest& r : out->requests) {
    Left(index, r);
  }
  queued_ -= plan.count;
  // One request filling the size, or an unbatched module's single request.
  out->pass_through = plan.count == 1 && (plan.rows == plan.batch_size || plan.batch_size == 0);
}

void Scheduler::DispatchCommitted(Nanos now, Dispatch* out) {
  Committed next = std::move(committed_.front());
  committed_.erase(committed_.begin());
  committed_metas_.erase(next.request.meta_id);
  ModelState& m = models_[static_cast<size_t>(next.model)];
  out->model = next.model;
  // Committed sub-calls skip the laxity check (earlier stages already spent GPU time) but
  // still honour the hard deadline.
  if (next.request.deadline && *next.request.deadline <= now) {
    ++m.counters.shed;
    out->shed.push_back(std::move(next.request));
    return;
  }
  ModelQueue alone;
  alone.Push(next.request);
  BatchPlan plan = PlanBatch(alone, m.spec, m.cost, config_.batch_sizing, false);
  if (plan.failure) {
    ++m.counters.failed;
    out->failure = plan.failure;
    out->failed.push_back(std::move(next.request));
    return;
  }
  out->variant = next.request.variant;
  out->batch_size = plan.batch_size;
  out->rows = plan.rows;
  out->pass_through = plan.rows == plan.batch_size || plan.batch_size == 0;
  out->committed_meta = true;
  out->requests.push_back(std::move(next.request));
}

Decision Scheduler::Next(Nanos now) {
  Decision decision;
  // 1. Control commands, in posting order.
  for (SchedulerChange& command : pending_controls_) {
    if (command.kind == SchedulerChange::Kind::kSetPolicy) {
      models_[static_cast<size_t>(command.model)].weight = command.weight;
    } else if (command.kind == SchedulerChange::Kind::kSetResidency) {
      models_[static_cast<size_t>(command.model)].residency = command.residency;
    } else if (command.kind == SchedulerChange::Kind::kSetMaxBatchSize) {
      ModelState& m = models_[static_cast<size_t>(command.model)];
      m.spec.config.max_batch_size = command.max_batch_size;
      m.effective_cost_stale = true;  // Its next dispatch's size may differ now.
    } else if (command.kind == SchedulerChange::Kind::kSetTenantWeight) {
      shares_.SetTenantWeight(command.tenant, command.weight);
    } else if (command.kind == SchedulerChange::Kind::kSetMaxQueueDepth) {
      config_.max_queue_depth = command.max_queue_depth;
    } else if (command.kind == SchedulerChange::Kind::kSetDiscipline) {
      // Tags kept advancing under fifo or edf without steering anything: start fair afresh
      // (everyone level at the virtual time) rather than let that history lock a model out.
      if (command.discipline == Discipline::kFair && config_.discipline != Discipline::kFair) {
        shares_.Level();
      }
      config_.discipline = command.discipline;
      for (ModelState& m : models_) {
        m.queue.TrackDeadlines(command.discipline == Discipline::kEdf);
      }
    }
    decision.controls.push_back(std::move(command));
  }
  pending_controls_.clear();
  Dispatch& out = decision.dispatch;
  // Requests that expired while queued and were taken out to make room: one model's per
  // decision, which then runs nothing (the caller answers them and asks again).
  if (!expired_.empty()) {
    out.model = expired_.front().first;
    auto rest = std::stable_partition(expired_.begin(), expired_.end(),
                                      [&](const auto& e) { return e.first != out.model; });
    for (auto it = rest; it != expired_.end(); ++it) {
      out.shed.push_back(std::move(it->second));
    }
    expired_.erase(rest, expired_.end());
    return decision;
  }
  // 2. A committed meta sub-call jumps ahead of the scan.
  if (!committed_.empty() && models_[static_cast<size_t>(committed_.front().model)].resident) {
    DispatchCommitted(now, &out);
  } else {
    // 3 and 4: select, then coalesce (which sheds). If shedding empties the winner's queue,
    // nothing runs this time: the caller fails the shed requests and asks again.
    uint32_t tenant = 0;
    int index = Select(now, &tenant);
    if (index >= 0) {
      Coalesce(index, tenant, now, &out);
    }
  }
  if (out.runs()) {
    RecordDispatched(models_[static_cast<size_t>(out.model)], out, now);
  }
  return decision;
}

bool Scheduler::HasRunnable() const {
  if (!expired_.empty()) {
    return true;
  }
  for (const Committed& c : committed_) {
    if (models_[static_cast<size_t>(c.model)].resident) {
      return true;
    }
  }
  return std::any_of(active_.begin(), active_.end(),
                     [this](int i) { return models_[static_cast<size_t>(i)].resident; });
}

void Scheduler::RecordDispatched(ModelState& m, Dispatch& d, Nanos now) {
  ChargeShares(m, d);
  ++m.counters.dispatch_count;
  m.counters.requests_served += d.requests.size();
  m.counters.rows_served += static_cast<uint64_t>(d.rows);
  m.counters.padding_rows += static_cast<uint64_t>(std::max<int64_t>(0, d.batch_size - d.rows));
  for (const QueuedRequest& r : d.requests) {
    m.waits.Record(now - r.arrival);
  }
  std::optional<int> size_index = SmallestFitting(m.spec.batch_sizes, d.batch_size);
  ++m.size_counts[static_cast<size_t>(size_index.value_or(0))];
  d.worst_recent_seconds =
      d.variant == kNoCompiledProgram
          ? -1
          : m.cost.MeasuredHigh(d.variant, size_index.value_or(0)).value_or(-1);
}

void Scheduler::Complete(const Dispatch& dispatch, double compute_seconds, Nanos now) {
  ModelState& m = models_[static_cast<size_t>(dispatch.model)];
  if (!std::isfinite(compute_seconds) || compute_seconds < 0) {
    compute_seconds = 0;  // A broken clock reading must not poison the EMAs.
  }
  std::optional<int> size_index = SmallestFitting(m.spec.batch_sizes, dispatch.batch_size);
  if (dispatch.variant != kNoCompiledProgram) {
    m.cost.Record(dispatch.variant, size_index.value_or(0), compute_seconds);
  }
  m.effective_cost_stale = true;
  // Correct the charges made at dispatch to the measured time.
  for (const Dispatch::ShareCharge& c : dispatch.charges) {
    shares_.Correct(c.tenant, dispatch.model, compute_seconds * c.fraction - c.seconds,
                    c.tenant_weight, c.model_weight);
  }
  m.counters.total_compute_seconds += compute_seconds;
  AddRecentCompute(m, compute_seconds, now);
}

void Scheduler::AddRecentCompute(ModelState& m, double seconds, Nanos now) {
  // recent values are stored scaled by 2^((t - epoch) / halflife): adding `seconds` at `now`
  // adds seconds * 2^((now - epoch) / halflife). When the scale grows large, move the epoch
  // to now and rescale everything, so nothing overflows however long the worker runs.
  double halflife_ns = config_.ema_halflife_seconds * kNanosPerSecond;
  double exponent = static_cast<double>(now - recent_epoch_) / halflife_ns;
  if (exponent > 256) {
    double shrink = std::exp2(-exponent);
    for (ModelState& other : models_) {
      other.recent *= shrink;
    }
    total_recent_ *= shrink;
    recent_epoch_ = now;
    exponent = 0;
  }
  double scaled = seconds * std::exp2(exponent);
  m.recent += scaled;
  total_recent_ += scaled;
}

}  // namespace ferry
