// First-fit allocation of aligned extents in an address range named by offsets, with
// coalescing on free. The bookkeeping behind every arena in ferry: a process's partition of
// the shared-memory segment, and the device (or host stand-in) weight arena.
//
// Thread safety: requires external synchronization.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

namespace ferry {

class ExtentAllocator {
 public:
  // REQUIRES: alignment is a power of two; capacity is a multiple of it.
  ExtentAllocator(uint64_t capacity, uint64_t alignment);

  // The offset of a new extent of at least `bytes` (rounded up to the alignment), or nullopt
  // when no free extent is large enough. REQUIRES: bytes > 0.
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // False when `offset` is not the start of a live extent (nothing changes).
  bool Free(uint64_t offset);
  // Forgets every extent.
  void Clear();

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const { return in_use_; }
  size_t live_extents() const { return live_.size(); }
  uint64_t largest_free() const;

 private:
  uint64_t capacity_;
  uint64_t alignment_;
  std::map<uint64_t, uint64_t> free_;            // offset -> length, coalesced.
  std::unordered_map<uint64_t, uint64_t> live_;  // offset -> reserved length.
  uint64_t in_use_ = 0;
};

}  // namespace ferry
