#include "worker/scheduler/cost_model.h"

#include <algorithm>

namespace ferry {

CostModel::CostModel(int num_variants, int num_sizes, double alpha)
    : num_sizes_(num_sizes),
      alpha_(alpha),
      entries_(static_cast<size_t>(std::max(num_variants, 1) * std::max(num_sizes, 1))) {}

const CostModel::Entry& CostModel::At(int variant, int size_index) const {
  return entries_[static_cast<size_t>(variant * num_sizes_ + size_index)];
}

void CostModel::Record(int variant, int size_index, double seconds) {
  Entry& e = entries_[static_cast<size_t>(variant * num_sizes_ + size_index)];
  e.ema = e.count == 0 ? seconds : alpha_ * seconds + (1 - alpha_) * e.ema;
  e.recent[static_cast<size_t>(e.count % kWindow)] = seconds;
  ++e.count;
}

double CostModel::Estimate(int variant, int size_index) const {
  const Entry& e = At(variant, size_index);
  return e.count == 0 ? kDefaultCostSeconds : e.ema;
}

double CostModel::HighPercentile(int variant, int size_index) const {
  const Entry& e = At(variant, size_index);
  if (e.count == 0) {
    return kDefaultCostSeconds;
  }
  int n = std::min(e.count, kWindow);
  return *std::max_element(e.recent.begin(), e.recent.begin() + n);
}

bool CostModel::Seeded(int variant, int size_index) const {
  return At(variant, size_index).count > 0;
}

std::optional<double> CostModel::MeasuredHigh(int variant, int size_index) const {
  if (!Seeded(variant, size_index)) {
    return std::nullopt;
  }
  return HighPercentile(variant, size_index);
}

}  // namespace ferry
