#include "worker/scheduler/fair_shares.h"

namespace ferry {

namespace {

// Removes `value` at `slot` from an unordered list by moving the last entry there; `slot_of`
// gives the moved entry's slot field to update.
template <typename T, typename SlotOf>
void SwapRemove(std::vector<T>& list, int& slot, SlotOf slot_of) {
  T last = list.back();
  list[static_cast<size_t>(slot)] = last;
  slot_of(last) = slot;
  list.pop_back();
  slot = -1;
}

}  // namespace

FairShares::Tenant& FairShares::tenant(uint32_t t) {
  if (t >= tenants_.size()) {
    tenants_.resize(t + 1);
    // A tenant seen for the first time starts level with the others.
    tenants_[t].finish = virtual_time_;
    tenants_[t].floor = virtual_time_;
  }
  return tenants_[t];
}

FairShares::Flow& FairShares::flow(uint32_t t, int model) {
  Tenant& owner = tenant(t);
  if (static_cast<size_t>(model) >= owner.flows.size()) {
    size_t before = owner.flows.size();
    owner.flows.resize(static_cast<size_t>(model) + 1);
    for (size_t i = before; i < owner.flows.size(); ++i) {
      owner.flows[i].finish = owner.virtual_time;
      owner.flows[i].floor = owner.virtual_time;
    }
  }
  return owner.flows[static_cast<size_t>(model)];
}

const FairShares::Flow* FairShares::find_flow(uint32_t t, int model) const {
  if (t >= tenants_.size() || static_cast<size_t>(model) >= tenants_[t].flows.size()) {
    return nullptr;
  }
  return &tenants_[t].flows[static_cast<size_t>(model)];
}

void FairShares::SetTenantWeight(uint32_t t, double weight) { tenant(t).weight = weight; }

double FairShares::tenant_weight(uint32_t t) const {
  return t < tenants_.size() ? tenants_[t].weight : 1.0;
}

void FairShares::Count(int model, const QueuedRequest& r, int sign) {
  uint32_t t = r.tenant;
  int64_t delta = sign;
  Tenant& owner = tenant(t);
  Flow& f = flow(t, model);
  if (f.queued == 0 && delta > 0) {
    f.floor = owner.virtual_time;
    f.slot = static_cast<int>(owner.active.size());
    owner.active.push_back(model);
  }
  if (owner.queued == 0 && delta > 0) {
    owner.floor = virtual_time_;
    owner.slot = static_cast<int>(active_.size());
    active_.push_back(t);
  }
  f.queued += delta;
  f.rows[r.priority] += sign * r.rows;
  owner.queued += delta;
  if (f.queued == 0 && f.slot >= 0) {
    SwapRemove(owner.active, f.slot,
               [&](int m) -> int& { return owner.flows[static_cast<size_t>(m)].slot; });
  }
  if (owner.queued == 0 && owner.slot >= 0) {
    SwapRemove(active_, owner.slot, [&](uint32_t u) -> int& { return tenants_[u].slot; });
  }
}

int64_t FairShares::queued(uint32_t t, int model) const {
  const Flow* f = find_flow(t, model);
  return f == nullptr ? 0 : f->queued;
}

int64_t FairShares::RowsAtOrAbove(uint32_t t, int model, Priority level) const {
  const Flow* f = find_flow(t, model);
  int64_t rows = 0;
  for (int l = kHighestPriority; f != nullptr && l <= level; ++l) {
    rows += f->rows[l];
  }
  return rows;
}

bool FairShares::LowerWaiting(uint32_t t, int model, Priority level) const {
  const Flow* f = find_flow(t, model);
  for (int l = level + 1; f != nullptr && l <= kLowestPriority; ++l) {
    if (f->rows[l] > 0) {
      return true;
    }
  }
  return false;
}

const std::vector<int>& FairShares::active_models(uint32_t t) const {
  static const std::vector<int> kNone;
  return t < tenants_.size() ? tenants_[t].active : kNone;
}

double FairShares::tenant_start(uint32_t t) const {
  return t < tenants_.size() ? tenants_[t].start() : virtual_time_;
}

double FairShares::flow_start(uint32_t t, int model) const {
  const Flow* f = find_flow(t, model);
  if (f != nullptr) {
    return f->start();
  }
  return t < tenants_.size() ? tenants_[t].virtual_time : 0.0;
}

void FairShares::Charge(uint32_t t, int model, double seconds, double model_weight, bool selected) {
  Tenant& owner = tenant(t);
  Flow& f = flow(t, model);
  double tenant_start = owner.start();
  double flow_start = f.start();
  if (selected) {
    virtual_time_ = std::max(virtual_time_, tenant_start);
    owner.virtual_time = std::max(owner.virtual_time, flow_start);
  }
  owner.finish = tenant_start + seconds / owner.weight;
  f.finish = flow_start + seconds / model_weight;
}

void FairShares::Correct(uint32_t t, int model, double delta, double tenant_weight,
                         double model_weight) {
  tenant(t).finish += delta / tenant_weight;
  flow(t, model).finish += delta / model_weight;
}

void FairShares::Floor(int model) {
  for (uint32_t t : active_) {
    Tenant& owner = tenants_[t];
    if (static_cast<size_t>(model) < owner.flows.size() &&
        owner.flows[static_cast<size_t>(model)].queued > 0) {
      Flow& f = owner.flows[static_cast<size_t>(model)];
      f.floor = std::max(f.floor, owner.virtual_time);
      owner.floor = std::max(owner.floor, virtual_time_);
    }
  }
}

void FairShares::Level() {
  for (Tenant& owner : tenants_) {
    owner.finish = owner.floor = virtual_time_;
    for (Flow& f : owner.flows) {
      f.finish = f.floor = owner.virtual_time;
    }
  }
}

}  // namespace ferry
