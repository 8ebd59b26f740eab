// fair's two levels (fair_shares.h): which tenant and model run next, which other tenants'
// requests may join the dispatch, and what each tenant is charged.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "worker/scheduler/scheduler.h"

namespace ferry {

int Scheduler::BestModelOf(uint32_t tenant, bool any_residency) const {
  int best = -1;
  double best_tag = 0;
  for (int index : shares_.active_models(tenant)) {
    const ModelState& m = models_[static_cast<size_t>(index)];
    if (!m.resident && !any_residency) {
      continue;
    }
    double tag = shares_.flow_start(tenant, index);
    bool better = best < 0 || tag < best_tag;
    if (!better && tag == best_tag) {
      const ModelState& b = models_[static_cast<size_t>(best)];
      if (any_residency) {
        better = Older(m, b);  // A load's turn: cost is unknown for weights out of memory.
      } else {
        double cost = EffectiveCost(m), best_cost = EffectiveCost(b);
        better = cost != best_cost ? cost < best_cost : Older(m, b);
      }
    }
    if (better) {
      best = index;
      best_tag = tag;
    }
  }
  return best;
}

int Scheduler::SelectFair(uint32_t* tenant, bool any_residency) const {
  int best = -1;
  uint32_t best_tenant = 0;
  double best_tag = 0;
  // Ties (tenants placed at the same virtual time): the more urgent, then older, first
  // request, then the lower tenant number, so fresh tenants keep priority order between them.
  auto first = [&](uint32_t t, int model) {
    const ModelQueue& q = models_[static_cast<size_t>(model)].queue;
    const QueuedRequest& r = q.at(q.FindTenant(t).value_or(0));
    return std::make_tuple(r.priority, r.arrival, t);
  };
  for (uint32_t t : shares_.active_tenants()) {
    double tag = shares_.tenant_start(t);
    if (best >= 0 && tag > best_tag) {
      continue;
    }
    int model = BestModelOf(t, any_residency);
    if (model >= 0 && (best < 0 || tag < best_tag || first(t, model) < first(best_tenant, best))) {
      best = model;
      best_tenant = t;
      best_tag = tag;
    }
  }
  *tenant = best_tenant;
  return best;
}

uint64_t Scheduler::FillerTenants(uint32_t tenant, int model) const {
  if (config_.discipline != Discipline::kFair || options_.round_robin) {
    return ~uint64_t{0};
  }
  uint64_t mask = uint64_t{1} << tenant;
  double tag = shares_.tenant_start(tenant);
  for (uint32_t u : shares_.active_tenants()) {
    if (u == tenant || shares_.queued(u, model) == 0 || shares_.tenant_start(u) > tag) {
      continue;
    }
    double flow = shares_.flow_start(u, model);
    const std::vector<int>& others = shares_.active_models(u);
    bool first = std::none_of(others.begin(), others.end(), [&](int n) {
      return models_[static_cast<size_t>(n)].resident && shares_.flow_start(u, n) < flow;
    });
    if (first) {
      mask |= uint64_t{1} << u;
    }
  }
  return mask;
}

void Scheduler::ChargeShares(const ModelState& m, Dispatch& d) {
  std::optional<int> planned = SmallestFitting(m.spec.batch_sizes, d.batch_size);
  d.charged_seconds =
      d.variant == kNoCompiledProgram ? 0 : m.cost.Estimate(d.variant, planned.value_or(0));
  // Rows by tenant, the front's (the tenant the dispatch was chosen for) first.
  d.charges.clear();
  int64_t total = 0;
  for (const QueuedRequest& r : d.requests) {
    auto it = std::find_if(d.charges.begin(), d.charges.end(),
                           [&](const Dispatch::ShareCharge& c) { return c.tenant == r.tenant; });
    if (it == d.charges.end()) {
      d.charges.push_back({.tenant = r.tenant, .fraction = 0});
      it = d.charges.end() - 1;
    }
    it->fraction += static_cast<double>(r.rows);
    total += r.rows;
  }
  for (size_t k = 0; k < d.charges.size(); ++k) {
    Dispatch::ShareCharge& c = d.charges[k];
    c.fraction /= static_cast<double>(total);
    c.seconds = d.charged_seconds * c.fraction;
    c.tenant_weight = shares_.tenant_weight(c.tenant);
    c.model_weight = m.weight;
    // A committed sub-call runs ahead of selection: charged, but it moves no virtual time
    // (docs/scheduler.md: its time adds to the others' gaps). Fillers are charged only.
    shares_.Charge(c.tenant, d.model, c.seconds, m.weight, k == 0 && !d.committed_meta);
  }
}

void Scheduler::ChargeLoad(int model, double seconds) {
  const ModelState& m = models_[static_cast<size_t>(model)];
  seconds = std::max(seconds, 0.0);
  // Split over the tenants waiting for the model, by their queued requests.
  int64_t waiting = 0;
  for (uint32_t t : shares_.active_tenants()) {
    waiting += shares_.queued(t, model);
  }
  if (waiting == 0) {
    shares_.Charge(0, model, seconds, m.weight, false);
    return;
  }
  for (uint32_t t : shares_.active_tenants()) {
    if (int64_t q = shares_.queued(t, model); q > 0) {
      shares_.Charge(t, model, seconds * static_cast<double>(q) / static_cast<double>(waiting),
                     m.weight, false);
    }
  }
}

int Scheduler::NextColdLoad() const {
  // The backlogged model the discipline would serve first, resident or not: a load starts
  // only at its model's turn, so loads keep the order (and, charged, the shares) dispatches do.
  int best = -1;
  if (config_.discipline == Discipline::kFair && !options_.round_robin) {
    uint32_t tenant = 0;
    best = SelectFair(&tenant, /*any_residency=*/true);
  } else {
    for (int index : active_) {
      if (best < 0 ||
          Older(models_[static_cast<size_t>(index)], models_[static_cast<size_t>(best)])) {
        best = index;
      }
    }
  }
  return best >= 0 && !models_[static_cast<size_t>(best)].resident ? best : -1;
}

void Scheduler::SetResident(int model, bool resident) {
  ModelState& m = models_[static_cast<size_t>(model)];
  // Back in memory: it starts no earlier than the virtual time, as a model returning from a
  // pause does, so time spent out earns no burst over the models that stayed.
  if (resident && !m.resident) {
    shares_.Floor(model);
  }
  m.resident = resident;
}

std::optional<size_t> Scheduler::LeadOf(int index, uint32_t tenant) {
  const ModelQueue& queue = models_[static_cast<size_t>(index)].queue;
  std::optional<size_t> first =
      queue.front().tenant == tenant ? std::optional<size_t>(0) : queue.FindTenant(tenant);
  if (!first) {
    return std::nullopt;
  }
  Priority level = queue.at(*first).priority;
  uint32_t& run = shares_.urgent_run(tenant, index);
  if (config_.lower_level_share <= 0 || !shares_.LowerWaiting(tenant, index, level)) {
    run = 0;
    return first;
  }
  // Every ceil(1 / share)-th dispatch of the flow while lower levels wait is theirs.
  auto period = static_cast<uint32_t>(std::ceil(1.0 / config_.lower_level_share));
  if (++run < period) {
    return first;
  }
  run = 0;
  return queue.FindOldestBelow(tenant, level);
}

double Scheduler::FlowShare(uint32_t tenant, int model) const {
  double w_t = shares_.tenant_weight(tenant);
  double tenants = 0;
  bool tenant_active = false;
  for (uint32_t u : shares_.active_tenants()) {
    tenants += shares_.tenant_weight(u);
    tenant_active = tenant_active || u == tenant;
  }
  tenants += tenant_active ? 0 : w_t;
  double w_m = models_[static_cast<size_t>(model)].weight;
  double models = 0;
  bool model_active = false;
  for (int n : shares_.active_models(tenant)) {
    models += models_[static_cast<size_t>(n)].weight;
    model_active = model_active || n == model;
  }
  models += model_active ? 0 : w_m;
  return (w_t / tenants) * (w_m / models);
}

std::optional<Error> Scheduler::RefuseByWait(int model,
                                             std::span<const QueuedRequest> pieces) const {
  const QueuedRequest& first = pieces.front();
  double max_wait = config_.max_wait_seconds[static_cast<size_t>(first.priority)];
  if (max_wait <= 0 || config_.discipline != Discipline::kFair || options_.round_robin ||
      first.variant == kNoCompiledProgram) {
    return std::nullopt;
  }
  const ModelState& m = models_[static_cast<size_t>(model)];
  int largest = static_cast<int>(m.spec.batch_sizes.size()) - 1;
  if (!m.cost.Seeded(first.variant, largest)) {
    return std::nullopt;  // No guess refuses a request.
  }
  double batch = m.cost.Estimate(first.variant, largest);
  double per_row = batch / static_cast<double>(std::max<int64_t>(m.spec.batch_sizes.back(), 1));
  auto ahead = static_cast<double>(shares_.RowsAtOrAbove(first.tenant, model, first.priority));
  double wait = ahead * per_row / FlowShare(first.tenant, model) + batch;
  if (wait <= max_wait) {
    return std::nullopt;
  }
  const std::string& name = config_.priority_names[static_cast<size_t>(first.priority)];
  auto ms = [](double seconds) { return static_cast<int64_t>(std::ceil(seconds * 1000)); };
  return ResourceExhausted(
      "model '" + m.spec.name + "': a priority " + std::to_string(first.priority) +
      (name.empty() ? "" : " ('" + name + "')") + " request would wait about " +
      std::to_string(ms(wait)) + " ms here, past its max_wait_ms " + std::to_string(ms(max_wait)) +
      "; " + RetryHint(ms(wait - max_wait)));
}

Status Scheduler::SetTenantWeight(uint32_t tenant, double weight) {
  if (tenant >= kMaxSchedulerTenants) {
    return InvalidArgument("set_tenant: no tenant number " + std::to_string(tenant));
  }
  if (!(weight > 0) || !std::isfinite(weight)) {
    return InvalidArgument("set_tenant: weight must be finite and > 0");
  }
  SchedulerChange command;
  command.kind = SchedulerChange::Kind::kSetTenantWeight;
  command.tenant = tenant;
  command.weight = weight;
  pending_controls_.push_back(command);
  return OkStatus();
}

}  // namespace ferry
