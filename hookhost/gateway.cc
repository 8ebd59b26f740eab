#include "hookhost/gateway.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "common/mix.h"

namespace ferry::hookhost {

Gateway::Gateway(GatewayMode mode, size_t num_models) : mode_(mode), placement_(num_models, -1) {}

Result<size_t> Gateway::ChooseForSequence(std::string_view model_name, uint64_t key,
                                          uint64_t output_bytes,
                                          std::span<const WorkerView> workers,
                                          std::span<const uint32_t> slots) {
  std::optional<size_t> best;
  uint64_t best_score = 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    if (!workers[w].failure.empty()) {
      continue;
    }
    uint64_t score = Mix64(key ^ Mix64(slots[w] + 0x9e3779b97f4a7c15ULL));
    if (!best || score > best_score) {
      best = w;
      best_score = score;
    }
  }
  std::string model_text = "model '" + std::string(model_name) + "'";
  if (!best) {
    return Unavailable(model_text + " is loaded on no worker");
  }
  const WorkerView& v = workers[*best];
  std::string holder =
      "the worker holding this sequence (slot " + std::to_string(slots[*best]) + ")";
  if (!v.ready || !v.has_model) {
    return Unavailable(model_text + ": " + holder + " is not serving it now (retry in " +
                       std::to_string(kRetryAfterMs) + " ms)");
  }
  if (v.queue_depth >= v.max_queue_depth || v.arena_free < output_bytes) {
    return ResourceExhausted(model_text + ": " + holder + " has a full " +
                             (v.queue_depth >= v.max_queue_depth ? "queue" : "arena") +
                             " (retry in " + std::to_string(kRetryAfterMs) + " ms)");
  }
  return *best;
}

Result<size_t> Gateway::Choose(int model, std::string_view model_name, uint64_t output_bytes,
                               std::span<const WorkerView> workers) {
  std::vector<size_t> eligible;
  bool any_ready = false, any_model = false, queue_full = false;
  std::string_view failure;
  for (size_t w = 0; w < workers.size(); ++w) {
    const WorkerView& v = workers[w];
    if (!v.ready) {
      continue;
    }
    any_ready = true;
    if (!v.failure.empty()) {
      failure = v.failure;
    }
    if (!v.has_model) {
      continue;
    }
    any_model = true;
    if (v.queue_depth >= v.max_queue_depth) {
      queue_full = true;
      continue;
    }
    if (v.arena_free < output_bytes) {
      continue;
    }
    eligible.push_back(w);
  }
  std::string model_text = "model '" + std::string(model_name) + "'";
  if (eligible.empty()) {
    if (!any_ready) {
      return Unavailable(model_text + ": no worker is ready (retry in " +
                         std::to_string(kRetryAfterMs) + " ms)");
    }
    if (!any_model && !failure.empty()) {
      return Unavailable(model_text + " failed to load: " + std::string(failure));
    }
    if (!any_model) {
      return Unavailable(model_text + " is loaded on no ready worker");
    }
    return ResourceExhausted(model_text + ": every worker serving it has a full " +
                             std::string(queue_full ? "queue" : "arena") + " (retry in " +
                             std::to_string(kRetryAfterMs) + " ms)");
  }
  std::vector<size_t> responsive;
  std::copy_if(eligible.begin(), eligible.end(), std::back_inserter(responsive),
               [&](size_t w) { return workers[w].responsive; });
  if (!responsive.empty()) {
    eligible = std::move(responsive);
  }
  std::vector<size_t> resident;
  std::copy_if(eligible.begin(), eligible.end(), std::back_inserter(resident),
               [&](size_t w) { return workers[w].resident; });
  const std::vector<size_t>& candidates = resident.empty() ? eligible : resident;

  switch (mode_) {
    case GatewayMode::kRoundRobin: {
      // The first candidate at or after the cursor, wrapping.
      auto it = std::lower_bound(candidates.begin(), candidates.end(), cursor_);
      size_t chosen = it != candidates.end() ? *it : candidates.front();
      cursor_ = chosen + 1;
      return chosen;
    }
    case GatewayMode::kLptPacking: {
      int placed = placement_[static_cast<size_t>(model)];
      if (placed >= 0 && std::find(eligible.begin(), eligible.end(), static_cast<size_t>(placed)) !=
                             eligible.end()) {
        return static_cast<size_t>(placed);
      }
      return LeastOutstanding(workers, candidates);
    }
    case GatewayMode::kLeastOutstanding:
      break;
  }
  return LeastOutstanding(workers, candidates);
}

size_t Gateway::LeastOutstanding(std::span<const WorkerView> workers,
                                 const std::vector<size_t>& candidates) {
  // Scanning from the cursor makes ties rotate instead of always favouring worker 0.
  auto start = static_cast<size_t>(std::lower_bound(candidates.begin(), candidates.end(), cursor_) -
                                   candidates.begin());
  size_t best = candidates[start % candidates.size()];
  for (size_t k = 1; k < candidates.size(); ++k) {
    size_t w = candidates[(start + k) % candidates.size()];
    if (workers[w].outstanding < workers[best].outstanding) {
      best = w;
    }
  }
  cursor_ = best + 1;
  return best;
}

void Gateway::Repack(std::span<const double> load, size_t num_workers) {
  if (num_workers == 0) {
    return;
  }
  std::vector<size_t> order(placement_.size());
  std::iota(order.begin(), order.end(), 0);
  auto load_of = [&](size_t m) { return m < load.size() ? load[m] : 0.0; };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return load_of(a) > load_of(b); });
  // Ties in load go to the worker with fewer models, so unmeasured (zero-load) models spread.
  std::vector<std::pair<double, size_t>> placed(num_workers, {0.0, 0});
  for (size_t m : order) {
    size_t lightest =
        static_cast<size_t>(std::min_element(placed.begin(), placed.end()) - placed.begin());
    placement_[m] = static_cast<int>(lightest);
    placed[lightest].first += load_of(m);
    ++placed[lightest].second;
  }
}

}  // namespace ferry::hookhost
