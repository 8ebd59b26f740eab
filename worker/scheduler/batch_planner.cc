#include "worker/scheduler/batch_planner.h"

#include <algorithm>

namespace ferry {

std::optional<int> SmallestFitting(const std::vector<int64_t>& sizes, int64_t rows) {
  auto it = std::lower_bound(sizes.begin(), sizes.end(), rows);
  if (it == sizes.end()) {
    return std::nullopt;
  }
  return static_cast<int>(it - sizes.begin());
}

int64_t EffectiveMaxBatch(const ModelSpec& spec) {
  int64_t largest = spec.batch_sizes.back();
  if (largest == 0) {
    return 0;
  }
  return spec.config.max_batch_size ? std::min(*spec.config.max_batch_size, largest) : largest;
}

namespace {

// The front request alone, at the smallest compiled size that holds it.
BatchPlan Alone(const QueuedRequest& front, const ModelSpec& spec) {
  BatchPlan plan;
  plan.count = 1;
  plan.picks = {0};
  plan.rows = front.rows;
  if (spec.batch_sizes.back() == 0) {
    return plan;  // Unbatched module: size 0.
  }
  std::optional<int> fit = SmallestFitting(spec.batch_sizes, front.rows);
  if (!fit) {
    plan.failure = InvalidArgument(
        "model '" + spec.name + "': request of " + std::to_string(front.rows) +
        " rows exceeds the largest compiled batch size " + std::to_string(spec.batch_sizes.back()));
    return plan;
  }
  plan.size_index = *fit;
  plan.batch_size = spec.batch_sizes[static_cast<size_t>(*fit)];
  return plan;
}

// The longest same-variant prefix whose rows stay within `bound`: (count, rows).
bool Allowed(uint64_t tenants, const QueuedRequest& r) {
  return r.tenant < 64 && ((tenants >> r.tenant) & 1) != 0;
}

std::pair<size_t, int64_t> Prefix(const ModelQueue& queue, int64_t bound, uint64_t tenants) {
  int variant = queue.front().variant;
  size_t count = 0;
  int64_t rows = 0;
  while (count < queue.size() && queue.at(count).variant == variant &&
         (count == 0 || Allowed(tenants, queue.at(count))) &&
         rows + queue.at(count).rows <= bound) {
    rows += queue.at(count).rows;
    ++count;
  }
  return {count, rows};
}

BatchPlan Taken(const ModelSpec& spec, size_t count, int64_t rows) {
  BatchPlan plan;
  plan.count = count;
  for (size_t i = 0; i < count; ++i) {
    plan.picks.push_back(i);
  }
  plan.rows = rows;
  plan.size_index = *SmallestFitting(spec.batch_sizes, rows);
  plan.batch_size = spec.batch_sizes[static_cast<size_t>(plan.size_index)];
  return plan;
}

}  // namespace

BatchPlan PlanBatch(const ModelQueue& queue, const ModelSpec& spec, const CostModel& cost,
                    BatchSizing sizing, bool coalesce, uint64_t tenants) {
  const QueuedRequest& front = queue.front();
  if (front.variant == kNoCompiledProgram) {
    BatchPlan plan;
    plan.count = 1;
    plan.picks = {0};
    plan.rows = front.rows;
    plan.failure =
        InvalidArgument("model '" + spec.name + "': no compiled program for input shape");
    return plan;
  }
  int64_t limit = EffectiveMaxBatch(spec);
  if (!spec.coalescable || !coalesce || limit == 0 || front.rows > limit) {
    return Alone(front, spec);
  }
  const std::vector<int64_t>& sizes = spec.batch_sizes;
  if (sizing == BatchSizing::kCost) {
    BatchPlan best;
    double best_rate = -1;
    for (int64_t size : sizes) {
      auto [count, rows] = Prefix(queue, std::min(size, limit), tenants);
      if (count == 0) {
        continue;
      }
      BatchPlan plan = Taken(spec, count, rows);
      double rate = static_cast<double>(rows) / cost.Estimate(front.variant, plan.size_index);
      if (rate > best_rate) {
        best_rate = rate;
        best = plan;
      }
    }
    return best;
  }
  // kLargest: fill the cap. Requests of the front's variant are taken in FIFO order (others
  // stay queued in place) until the next would pass the cap or none of the variant is left;
  // requests are never split, so each full dispatch carries more than cap - r rows for
  // requests of at most r rows. The rows then run at the smallest compiled size holding them
  // (padded), which also makes a cap that is not a compiled size coalesce up to the cap.
  BatchPlan plan;
  int variant = front.variant;
  int64_t left = queue.variant_rows(variant);
  for (size_t i = 0; i < queue.size() && left > 0; ++i) {
    const QueuedRequest& r = queue.at(i);
    if (r.variant != variant || (i > 0 && !Allowed(tenants, r))) {
      continue;
    }
    if (plan.rows + r.rows > limit) {
      break;
    }
    plan.picks.push_back(i);
    plan.rows += r.rows;
    left -= r.rows;
  }
  plan.count = plan.picks.size();
  plan.size_index = *SmallestFitting(sizes, plan.rows);
  plan.batch_size = sizes[static_cast<size_t>(plan.size_index)];
  return plan;
}

}  // namespace ferry
