#include "common/extent_allocator.h"

#include <algorithm>
#include <iterator>

namespace ferry {

ExtentAllocator::ExtentAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity), alignment_(alignment) {
  Clear();
}

void ExtentAllocator::Clear() {
  free_.clear();
  live_.clear();
  in_use_ = 0;
  if (capacity_ > 0) {
    free_[0] = capacity_;
  }
}

std::optional<uint64_t> ExtentAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > capacity_) {
    return std::nullopt;
  }
  uint64_t reserved = (bytes + alignment_ - 1) / alignment_ * alignment_;
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
    return offset;
  }
  return std::nullopt;
}

bool ExtentAllocator::Free(uint64_t offset) {
  auto live = live_.find(offset);
  if (live == live_.end()) {
    return false;
  }
  uint64_t length = live->second;
  live_.erase(live);
  in_use_ -= length;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return true;
    }
  }
  free_[offset] = length;
  return true;
}

uint64_t ExtentAllocator::largest_free() const {
  uint64_t largest = 0;
  for (const auto& [offset, length] : free_) {
    largest = std::max(largest, length);
  }
  return largest;
}

}  // namespace ferry
