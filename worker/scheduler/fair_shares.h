// Two-level start-time fair queueing (docs/scheduler.md, "Tenants"): GPU seconds are shared
// between backlogged tenants by tenant weight, then between one tenant's backlogged models by
// model weight, with the same rule at both levels (Goyal, Vin and Cheng's SFQ):
//
// - a tenant (a flow: a tenant's requests at one model) has a virtual start tag
//   S = max(F, floor), F its finish tag; the smallest S runs next;
// - a charge of c seconds advances the tenant's F by c / tenant weight and the flow's by
//   c / model weight;
// - a dispatch chosen by selection moves each level's virtual time to the start tag it was
//   chosen at (the tenant level's V for tenants, the tenant's own V_t for its flows);
// - a tenant or flow that becomes backlogged is floored at its level's virtual time, so idle
//   time earns no credit and uncontended use no debt.
//
// Requests that name no tenant are tenant 0, so a node without tenants has one tenant and the
// model level alone decides, exactly as the single-level scheduler did.
//
// This class keeps the tags and the backlog counts; which request runs is the Scheduler's.
// Thread safety: requires external synchronization (the dispatch loop owns it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "worker/scheduler/scheduler_types.h"

namespace ferry {

// Tenant numbers the scheduler accepts: 0 (none) to kMaxSchedulerTenants - 1, so a set of
// tenants fits one 64-bit mask.
inline constexpr uint32_t kMaxSchedulerTenants = 64;

class FairShares {
 public:
  // REQUIRES (every call): tenant < kMaxSchedulerTenants, model >= 0.

  // A tenant's weight (> 0; 1 until set). A change applies to charges made afterwards.
  void SetTenantWeight(uint32_t tenant, double weight);
  double tenant_weight(uint32_t tenant) const;

  // Request `r` of `tenant` was queued (sign +1) at `model` or left its queue (-1). A tenant
  // or flow whose count rises from zero is floored at its level's virtual time.
  // REQUIRES: the count never goes below zero; r.priority is a level.
  void Count(int model, const QueuedRequest& r, int sign);
  int64_t queued(uint32_t tenant, int model) const;
  // Rows `tenant` has queued at `model` at priority `level` or a more urgent one.
  int64_t RowsAtOrAbove(uint32_t tenant, int model, Priority level) const;
  // Whether `tenant` has requests queued at `model` at a level less urgent than `level`.
  bool LowerWaiting(uint32_t tenant, int model, Priority level) const;
  // The flow's dispatches in a row led by a more urgent request while a less urgent one
  // waited (the lower-level share's counter, scheduler.h).
  uint32_t& urgent_run(uint32_t tenant, int model) { return flow(tenant, model).urgent_run; }

  // Tenants with queued requests, and a tenant's models with queued requests (unordered).
  const std::vector<uint32_t>& active_tenants() const { return active_; }
  const std::vector<int>& active_models(uint32_t tenant) const;

  double tenant_start(uint32_t tenant) const;
  double flow_start(uint32_t tenant, int model) const;

  // Charges `seconds` of a dispatch of `model` to `tenant` (its share of the dispatch's
  // rows) at the tenant's current weight and `model_weight`. `selected`: the dispatch was
  // chosen for this tenant and model, so both virtual times move to their start tags first.
  void Charge(uint32_t tenant, int model, double seconds, double model_weight, bool selected);
  // Adds `delta` seconds (negative: a refund) to a charge made at the weights given.
  void Correct(uint32_t tenant, int model, double delta, double tenant_weight, double model_weight);
  // `model`'s weights are back in memory: its backlogged flows, and their tenants, start no
  // earlier than their levels' virtual times (no credit for the time out).
  void Floor(int model);
  // Every tenant and flow level at its virtual time (fair resumes after fifo or edf).
  void Level();

 private:
  struct Flow {
    double finish = 0;
    double floor = 0;
    int64_t queued = 0;
    int64_t rows[kLowestPriority + 1] = {};  // Queued rows by priority level.
    uint32_t urgent_run = 0;
    int slot = -1;  // Position in the tenant's active list, or -1.
    double start() const { return std::max(finish, floor); }
  };
  struct Tenant {
    double weight = 1;
    double finish = 0;
    double floor = 0;
    double virtual_time = 0;  // The model level's V within this tenant.
    int64_t queued = 0;
    int slot = -1;  // Position in active_, or -1.
    std::vector<Flow> flows;
    std::vector<int> active;
    double start() const { return std::max(finish, floor); }
  };

  Tenant& tenant(uint32_t t);
  Flow& flow(uint32_t t, int model);
  const Flow* find_flow(uint32_t t, int model) const;

  std::vector<Tenant> tenants_;  // Grown on first use of a number.
  std::vector<uint32_t> active_;
  double virtual_time_ = 0;  // The tenant level's V.
};

}  // namespace ferry
