#include "worker/wait_histogram.h"

#include <cmath>

namespace ferry {

namespace {
constexpr int64_t kFirstBoundNanos = 1000;  // Bucket 0 holds everything up to 1 us.
}

int WaitHistogram::BucketOf(int64_t nanos) {
  if (nanos <= kFirstBoundNanos) {
    return 0;
  }
  double octaves = std::log2(static_cast<double>(nanos) / kFirstBoundNanos);
  int bucket = 1 + static_cast<int>(octaves * kSubBuckets);
  return bucket >= kBuckets ? kBuckets - 1 : bucket;
}

int64_t WaitHistogram::UpperBound(int bucket) {
  return static_cast<int64_t>(kFirstBoundNanos *
                              std::exp2(static_cast<double>(bucket) / kSubBuckets));
}

void WaitHistogram::Record(int64_t nanos) {
  ++buckets_[static_cast<size_t>(BucketOf(nanos))];
  ++count_;
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
