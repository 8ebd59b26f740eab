// A bounded histogram of durations (8 equal buckets per power of two, 1 us to ~38 hours),
// for queue-wait percentiles that never grow with traffic. A percentile is exact to one
// bucket: at most 12.5% above the true value.
//
// Thread safety: requires external synchronization.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace ferry {

class WaitHistogram {
 public:
  static constexpr int kSubBuckets = 8;
  static constexpr int kOctaves = 37;  // 1 us * 2^37 ~ 38 hours.
  static constexpr int kBuckets = kSubBuckets * kOctaves + 1;

  void Record(int64_t nanos);
  // The value below which `fraction` of the records fall (upper bound of its bucket), in
  // nanoseconds; 0 when empty. REQUIRES: 0 <= fraction <= 1.
  int64_t Percentile(double fraction) const;
  uint64_t count() const { return count_; }
  int64_t sum_ns() const { return sum_ns_; }
  // Records whose bucket lies wholly at or below `nanos` (a record in the bucket straddling
  // it counts at the next bound up: at most 1/8 of an octave late).
  uint64_t CountAtMost(int64_t nanos) const;
  // CountAtMost for each of `bounds` (ascending), in one pass over the buckets.
  std::vector<uint64_t> CountsAtMost(std::span<const int64_t> bounds) const;

 private:
  static int BucketOf(int64_t nanos);
  static int64_t UpperBound(int bucket);

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  int64_t sum_ns_ = 0;  // Saturating.
};

}  // namespace ferry
