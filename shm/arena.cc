#include "shm/arena.h"

namespace ferry::shm {

ArenaStats ReadArenaStats(const Segment& segment, uint32_t slot) {
  const AccountingData& d = segment.accounting(slot);
  return {d.bytes_in_use.load(std::memory_order_relaxed),
          d.high_water.load(std::memory_order_relaxed),
          d.failed_allocations.load(std::memory_order_relaxed),
          d.blocks_in_use.load(std::memory_order_relaxed), segment.partition_bytes()};
}

Arena::Arena(const Segment& segment, uint32_t slot)
    : slot_(slot),
      data_(&segment.accounting(slot)),
      base_(segment.partition(slot).data()),
      extents_(segment.partition_bytes(), kBlockAlignment) {}

Result<Block> Arena::Allocate(uint64_t bytes) {
  if (bytes == 0) {
    return InvalidArgument("arena of slot " + std::to_string(slot_) + ": zero-byte allocation");
  }
  std::optional<uint64_t> offset = extents_.Allocate(bytes);
  if (!offset) {
    data_->failed_allocations.fetch_add(1, std::memory_order_relaxed);
    return ResourceExhausted("arena of slot " + std::to_string(slot_) +
                             " is full: " + std::to_string(bytes) + " bytes requested, " +
                             std::to_string(extents_.in_use()) + " of " +
                             std::to_string(extents_.capacity()) + " in use");
  }
  Publish();
  return Block{slot_, *offset, bytes};
}

Status Arena::Free(uint64_t offset) {
  if (!extents_.Free(offset)) {
    return InvalidArgument("arena of slot " + std::to_string(slot_) + ": offset " +
                           std::to_string(offset) + " is not a live block");
  }
  Publish();
  return OkStatus();
}

void Arena::Publish() {
  uint64_t in_use = extents_.in_use();
  data_->bytes_in_use.store(in_use, std::memory_order_relaxed);
  data_->blocks_in_use.store(extents_.live_extents(), std::memory_order_relaxed);
  if (in_use > data_->high_water.load(std::memory_order_relaxed)) {
    data_->high_water.store(in_use, std::memory_order_relaxed);
  }
}

std::span<uint8_t> Arena::Bytes(const Block& block) const {
  return {base_ + block.offset, block.bytes};
}

}  // namespace ferry::shm
