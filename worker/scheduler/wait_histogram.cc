#include "worker/scheduler/wait_histogram.h"

#include <cmath>
#include <limits>

namespace ferry {

namespace {
constexpr int64_t kFirstBoundNanos = 1000;  // Bucket 0 holds everything up to 1 us.
}

// Bucket 1 + 8e + s holds (1 us * 2^e * (1 + s/8), 1 us * 2^e * (1 + (s+1)/8)]: eight equal
// sub-buckets per power of two, found from the exponent and mantissa without a log.
int WaitHistogram::BucketOf(int64_t nanos) {
  if (nanos <= kFirstBoundNanos) {
    return 0;
  }
  double x = static_cast<double>(nanos) / kFirstBoundNanos;
  int exponent = std::ilogb(x);
  double mantissa = std::ldexp(x, -exponent);  // [1, 2)
  int sub = static_cast<int>((mantissa - 1.0) * kSubBuckets);
  int bucket = 1 + exponent * kSubBuckets + sub;
  return bucket >= kBuckets ? kBuckets - 1 : bucket;
}

int64_t WaitHistogram::UpperBound(int bucket) {
  if (bucket == 0) {
    return kFirstBoundNanos;
  }
  int exponent = (bucket - 1) / kSubBuckets;
  int sub = (bucket - 1) % kSubBuckets;
  return static_cast<int64_t>(
      std::ldexp(kFirstBoundNanos * (1.0 + (sub + 1.0) / kSubBuckets), exponent));
}

void WaitHistogram::Record(int64_t nanos) {
  ++buckets_[static_cast<size_t>(BucketOf(nanos))];
  ++count_;
  if (nanos > 0 && __builtin_add_overflow(sum_ns_, nanos, &sum_ns_)) {
    sum_ns_ = std::numeric_limits<int64_t>::max();
  }
}

uint64_t WaitHistogram::CountAtMost(int64_t nanos) const {
  return CountsAtMost(std::span(&nanos, 1))[0];
}

std::vector<uint64_t> WaitHistogram::CountsAtMost(std::span<const int64_t> bounds) const {
  std::vector<uint64_t> out;
  out.reserve(bounds.size());
  uint64_t n = 0;
  int b = 0;
  for (int64_t bound : bounds) {
    for (; b < kBuckets && UpperBound(b) <= bound; ++b) {
      n += buckets_[static_cast<size_t>(b)];
    }
    out.push_back(n);
  }
  return out;
}

int64_t WaitHistogram::Percentile(double fraction) const {
  if (count_ == 0) {
    return 0;
  }
  uint64_t rank = static_cast<uint64_t>(std::ceil(fraction * static_cast<double>(count_)));
  if (rank == 0) {
    rank = 1;
  }
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[static_cast<size_t>(b)];
    if (seen >= rank) {
      return UpperBound(b);
    }
  }
  return UpperBound(kBuckets - 1);
}

}  // namespace ferry
