#include "shm/descriptor.h"

#include <algorithm>
#include <string>

namespace ferry::shm {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr uint16_t kMaxDType = static_cast<uint16_t>(DType::kC64);

}  // namespace

Status ValidateDescriptor(const DescriptorData& d, const DescriptorRules& rules) {
  // Messages are built only on failure: the valid path allocates nothing.
  auto who = [&] {
    return "descriptor from slot " + std::to_string(rules.request_slot) + " seq " +
           std::to_string(d.sequence) + ": ";
  };
  if (d.kind < static_cast<uint16_t>(DescriptorKind::kSubmit) ||
      d.kind > static_cast<uint16_t>(DescriptorKind::kCancel)) {
    return InvalidArgument(who() + "unknown kind " + std::to_string(d.kind));
  }
  if ((rules.allowed_kinds & KindBit(static_cast<DescriptorKind>(d.kind))) == 0) {
    return InvalidArgument(who() + "kind " + std::to_string(d.kind) +
                           " does not belong on this ring");
  }
  if (d.slot != rules.request_slot) {
    return InvalidArgument(who() + "claims slot " + std::to_string(d.slot));
  }
  if (d.num_tensors > kMaxTensors) {
    return InvalidArgument(who() + std::to_string(d.num_tensors) + " tensors, more than " +
                           std::to_string(kMaxTensors));
  }
  bool submit = d.kind == static_cast<uint16_t>(DescriptorKind::kSubmit);
  bool cancel = d.kind == static_cast<uint16_t>(DescriptorKind::kCancel);
  if ((submit || cancel) && d.model >= rules.num_models) {
    return InvalidArgument(who() + "model " + std::to_string(d.model) + " out of range (" +
                           std::to_string(rules.num_models) + " models)");
  }
  if (cancel && d.num_tensors != 0) {
    return InvalidArgument(who() + "a cancel names no tensor");
  }
  if (submit) {
    if (d.rows < 1 || d.rows > kMaxRowsPerRequest) {
      return InvalidArgument(who() + "rows " + std::to_string(d.rows) + " out of range");
    }
    if (d.variant < -1) {
      return InvalidArgument(who() + "variant " + std::to_string(d.variant) + " out of range");
    }
    if (d.deadline_ns < 0) {
      return InvalidArgument(who() + "negative deadline");
    }
    if (d.num_tensors == 0) {
      return InvalidArgument(who() + "a submission names no tensor");
    }
    if (d.priority > kMaxPriority) {
      return InvalidArgument(who() + "priority " + std::to_string(d.priority) + " out of range");
    }
    if (d.tenant > kMaxTenants) {
      return InvalidArgument(who() + "tenant " + std::to_string(d.tenant) + " out of range");
    }
    if ((d.sequence_flags & ~(kSequenceStart | kSequenceEnd)) != 0 ||
        (d.sequence_id == 0 && d.sequence_flags != 0)) {
      return InvalidArgument(who() + "sequence flags " + std::to_string(d.sequence_flags) +
                             " out of range");
    }
  }

  for (uint32_t i = 0; i < d.num_tensors; ++i) {
    const TensorRefData& t = d.tensors[i];
    auto at = [&] { return who() + "tensor " + std::to_string(i) + ": "; };
    if (std::find(rules.allowed_partitions.begin(), rules.allowed_partitions.end(), t.partition) ==
        rules.allowed_partitions.end()) {
      return InvalidArgument(at() + "partition " + std::to_string(t.partition) +
                             " is not the sender's");
    }
    if (t.dtype > kMaxDType) {
      return InvalidArgument(at() + "unknown dtype " + std::to_string(t.dtype));
    }
    if (t.rank > kMaxRank) {
      return InvalidArgument(at() + "rank " + std::to_string(t.rank) + " exceeds " +
                             std::to_string(kMaxRank));
    }
    uint64_t bits = static_cast<uint64_t>(DTypeBits(static_cast<DType>(t.dtype)));
    for (uint16_t k = 0; k < t.rank; ++k) {
      if (t.shape[k] < 0 || t.shape[k] > kMaxDim) {
        return InvalidArgument(at() + "dimension " + std::to_string(k) + " is " +
                               std::to_string(t.shape[k]));
      }
      if (__builtin_mul_overflow(bits, static_cast<uint64_t>(t.shape[k]), &bits)) {
        return InvalidArgument(at() + "shape x dtype size overflows");
      }
    }
    if (bits % 8 != 0 || bits / 8 != t.bytes) {
      return InvalidArgument(at() + "shape and dtype need " + std::to_string(bits / 8) +
                             " bytes but the descriptor says " + std::to_string(t.bytes));
    }
    if (t.offset % kBlockAlignment != 0) {
      return InvalidArgument(at() + "offset " + std::to_string(t.offset) +
                             " is not 256-byte aligned");
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, t.bytes, &end) || end > rules.partition_bytes) {
      return InvalidArgument(at() + "offset " + std::to_string(t.offset) + " + " +
                             std::to_string(t.bytes) + " bytes exceeds the partition's " +
                             std::to_string(rules.partition_bytes));
    }
  }
  return OkStatus();
}

std::span<uint8_t> TensorBytes(const Segment& segment, const TensorRefData& tensor) {
  return segment.partition(tensor.partition).subspan(tensor.offset, tensor.bytes);
}

TensorRefData MakeTensorRef(uint32_t partition, uint64_t offset, uint64_t bytes, DType dtype,
                            std::span<const int64_t> shape) {
  TensorRefData t{};
  t.partition = partition;
  t.offset = offset;
  t.bytes = bytes;
  t.dtype = static_cast<uint16_t>(dtype);
  t.rank = static_cast<uint16_t>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape);
  return t;
}

}  // namespace ferry::shm
