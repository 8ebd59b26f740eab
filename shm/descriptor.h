// What a descriptor means, and the checks a consumer runs on every one before use.
//
// A descriptor comes from another process that may be buggy or malicious. The consumer pops
// a private copy (ring.h) and validates that copy, so nothing can change between check and
// use: a kind this ring carries; a request id naming the right slot; counts within bounds
// (a submission names at least one tensor, a cancel none; a priority within kMaxPriority and a
// tenant within kMaxTenants); each
// tensor in a partition the sender may name, 256-byte aligned, inside the partition with no
// overflow, and with shape x dtype size == bytes. A bad descriptor is answered with an error
// completion and counted; nothing reads outside the segment.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/result.h"
#include "model/dtype.h"
#include "shm/layout.h"
#include "shm/segment.h"

namespace ferry::shm {

enum class DescriptorKind : uint16_t {
  kSubmit = 1,      // Hook host -> worker: run a request.
  kCompletion = 2,  // Worker -> hook host: a request's outcome and output tensors.
  kRelease = 3,     // Hook host -> worker: done with a completion's output blocks.
  kControl = 4,     // Supervisor -> process.
  kCancel = 5,      // Hook host -> worker: drop a queued request (its client left).
};

inline constexpr int64_t kMaxRowsPerRequest = int64_t{1} << 20;

inline constexpr uint32_t KindBit(DescriptorKind kind) { return 1u << static_cast<uint32_t>(kind); }
// The kinds each ring carries: a descriptor of another kind is rejected.
inline constexpr uint32_t kSubmissionRingKinds = KindBit(DescriptorKind::kSubmit) |
                                                 KindBit(DescriptorKind::kRelease) |
                                                 KindBit(DescriptorKind::kCancel);
inline constexpr uint32_t kCompletionRingKinds = KindBit(DescriptorKind::kCompletion);
inline constexpr uint32_t kControlRingKinds = KindBit(DescriptorKind::kControl);

struct DescriptorRules {
  uint32_t request_slot = 0;  // The ring's producer: request ids must name it.
  uint32_t num_models = 0;    // Submissions name a model below this.
  // Partitions the sender's tensors may lie in (usually just its own).
  std::vector<uint32_t> allowed_partitions;
  uint64_t partition_bytes = 0;
  // KindBit()s of the kinds this ring may carry.
  uint32_t allowed_kinds = kSubmissionRingKinds;
};

// OK, or INVALID_ARGUMENT naming the request slot, the sequence and the field that was wrong.
Status ValidateDescriptor(const DescriptorData& d, const DescriptorRules& rules);

// The bytes of a validated tensor, in place in the segment (no copy).
// REQUIRES: the descriptor passed ValidateDescriptor against this segment's partition size.
std::span<uint8_t> TensorBytes(const Segment& segment, const TensorRefData& tensor);

// Fills a tensor reference. REQUIRES: rank <= kMaxRank.
TensorRefData MakeTensorRef(uint32_t partition, uint64_t offset, uint64_t bytes, DType dtype,
                            std::span<const int64_t> shape);

}  // namespace ferry::shm
