// A process's arena: allocation in its own partition of the segment. Only the owner allocates
// and frees, so no lock is shared between processes. Blocks are 256-byte aligned and named by
// (partition, offset), never by pointer.
//
// The free list lives in the owner's private memory; only the accounting (bytes in use, high
// water, failed allocations, blocks) is in shared memory for anyone to read. A process killed
// mid-allocation therefore leaves nothing shared half-updated but its own counters, which
// ResetSlot zeroes; its successor starts with an empty arena.
//
// Thread safety: requires external synchronization (one owner thread, or the caller's lock).
// Process safety: AccountingData is in the owner's object, written by the owner only.
#pragma once

#include <cstdint>
#include <span>

#include "common/extent_allocator.h"
#include "common/result.h"
#include "shm/segment.h"

namespace ferry::shm {

struct Block {
  uint32_t partition = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;  // As requested (the reservation is rounded up to 256).
};

struct ArenaStats {
  uint64_t bytes_in_use = 0;
  uint64_t high_water = 0;
  uint64_t failed_allocations = 0;
  uint64_t blocks_in_use = 0;
  uint64_t capacity = 0;
};

// Anyone who maps the slot's object may read its accounting.
ArenaStats ReadArenaStats(const Segment& segment, uint32_t slot);

class Arena {
 public:
  // REQUIRES: this process owns `slot` and its partition is free (fresh or just reset).
  Arena(const Segment& segment, uint32_t slot);

  // RESOURCE_EXHAUSTED naming the slot, the request and the use when no free extent fits
  // (nothing else changes); INVALID_ARGUMENT for 0 bytes.
  Result<Block> Allocate(uint64_t bytes);
  // INVALID_ARGUMENT when `offset` is not the start of a live block of this arena.
  Status Free(uint64_t offset);

  std::span<uint8_t> Bytes(const Block& block) const;
  uint32_t slot() const { return slot_; }

 private:
  void Publish();  // Copies the accounting into shared memory.

  uint32_t slot_;
  AccountingData* data_;
  uint8_t* base_;
  ExtentAllocator extents_;
};

}  // namespace ferry::shm
