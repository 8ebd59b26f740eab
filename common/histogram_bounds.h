// Histogram bounds (Prometheus `le`) shared by the scheduler, which counts queue waits and
// batch sizes, the worker's status object, which carries the counts (shm/status.h), and
// ferryd's /metrics, which renders them.
//
// Thread safety: constants.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace ferry {

// Queue wait, in ns.
inline constexpr int64_t kQueueWaitBoundsNs[] = {
    100'000,       250'000,       500'000,       1'000'000,     2'500'000,   5'000'000,
    10'000'000,    25'000'000,    50'000'000,    100'000'000,   250'000'000, 500'000'000,
    1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
// Dispatched batch size, in rows.
inline constexpr int64_t kBatchSizeBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
inline constexpr size_t kQueueWaitBuckets = std::size(kQueueWaitBoundsNs);
inline constexpr size_t kBatchSizeBuckets = std::size(kBatchSizeBounds);

}  // namespace ferry
