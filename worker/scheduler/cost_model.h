// Learned execution cost per (variant, compiled batch size) of one model.
//
// Each measurement refines an EMA with weight alpha; the EMA starts at the first measurement
// so it converges at once rather than drifting up from zero. A high percentile (the max of
// the last 10 measurements, as Clockwork does) backs the edf laxity check, so shedding is not
// fooled by a mean. Unseeded pairs report kDefaultCostSeconds, small, so a laxity drop is a
// no-op until the model has run. Weight-load time must not be recorded here.
//
// Thread safety: requires external synchronization.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace ferry {

class CostModel {
 public:
  static constexpr double kDefaultCostSeconds = 1e-4;
  static constexpr int kWindow = 10;

  CostModel(int num_variants, int num_sizes, double alpha);

  // REQUIRES: 0 <= variant < num_variants, 0 <= size_index < num_sizes, seconds >= 0.
  void Record(int variant, int size_index, double seconds);
  double Estimate(int variant, int size_index) const;
  double HighPercentile(int variant, int size_index) const;
  bool Seeded(int variant, int size_index) const;
  // HighPercentile once the pair has a measurement; nullopt before (no default stands in).
  std::optional<double> MeasuredHigh(int variant, int size_index) const;

 private:
  struct Entry {
    double ema = 0;
    std::array<double, kWindow> recent{};
    int count = 0;  // Measurements so far (the window holds min(count, kWindow)).
  };
  const Entry& At(int variant, int size_index) const;

  int num_sizes_;
  double alpha_;
  std::vector<Entry> entries_;
};

}  // namespace ferry
