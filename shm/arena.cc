#include "shm/arena.h"

namespace ferry::shm {

ArenaStats ReadArenaStats(const Segment& segment, uint32_t slot) {
  const SlotData& d = segment.slot(slot);
  return {d.bytes_in_use.load(std::memory_order_relaxed),
          d.high_water.load(std::memory_order_relaxed),
          d.failed_allocations.load(std::memory_order_relaxed),
          d.blocks_in_use.load(std::memory_order_relaxed), segment.partition_bytes()};
}

Arena::Arena(const Segment& segment, uint32_t slot)
    : segment_(&segment),
      slot_(slot),
      data_(&segment.slot(slot)),
      base_(segment.partition(slot).data()),
      capacity_(segment.partition_bytes()) {
  free_[0] = capacity_;
}

Result<Block> Arena::Allocate(uint64_t bytes) {
  if (bytes == 0) {
    return InvalidArgument("arena of slot " + std::to_string(slot_) + ": zero-byte allocation");
  }
  uint64_t reserved = bytes > capacity_ ? capacity_ + 1 : AlignUp(bytes, kBlockAlignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < reserved) {
      continue;
    }
    uint64_t offset = it->first;
    uint64_t left = it->second - reserved;
    free_.erase(it);
    if (left > 0) {
      free_[offset + reserved] = left;
    }
    live_[offset] = reserved;
    in_use_ += reserved;
    data_->bytes_in_use.store(in_use_, std::memory_order_relaxed);
    data_->blocks_in_use.store(live_.size(), std::memory_order_relaxed);
    if (in_use_ > data_->high_water.load(std::memory_order_relaxed)) {
      data_->high_water.store(in_use_, std::memory_order_relaxed);
    }
    return Block{slot_, offset, bytes};
  }
  data_->failed_allocations.fetch_add(1, std::memory_order_relaxed);
  return ResourceExhausted("arena of slot " + std::to_string(slot_) + " is full: " +
                           std::to_string(bytes) + " bytes requested, " + std::to_string(in_use_) +
                           " of " + std::to_string(capacity_) + " in use");
}

Status Arena::Free(uint64_t offset) {
  auto live = live_.find(offset);
  if (live == live_.end()) {
    return InvalidArgument("arena of slot " + std::to_string(slot_) + ": offset " +
                           std::to_string(offset) + " is not a live block");
  }
  uint64_t length = live->second;
  live_.erase(live);
  in_use_ -= length;
  // Insert and coalesce with the neighbours.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      length = 0;
    }
  }
  if (length > 0) {
    free_[offset] = length;
  }
  data_->bytes_in_use.store(in_use_, std::memory_order_relaxed);
  data_->blocks_in_use.store(live_.size(), std::memory_order_relaxed);
  return OkStatus();
}

std::span<uint8_t> Arena::Bytes(const Block& block) const {
  return {base_ + block.offset, block.bytes};
}

}  // namespace ferry::shm
