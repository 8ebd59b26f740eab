#include "shm/key_table.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace ferry::shm {

Status PublishKeys(KeyTableData& table, const std::vector<KeyEntry>& keys) {
  if (keys.size() > kMaxKeys) {
    return InvalidArgument("the node holds at most " + std::to_string(kMaxKeys) + " API keys (" +
                           std::to_string(keys.size()) + " given)");
  }
  uint64_t sequence = table.sequence.load(std::memory_order_relaxed) & ~uint64_t{1};
  table.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  table.count = static_cast<uint32_t>(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::memcpy(table.keys[i].digest, keys[i].digest.data(), 32);
    table.keys[i].tenant = keys[i].tenant;
    table.keys[i].reserved = 0;
  }
  table.sequence.store(sequence + 2, std::memory_order_release);
  return OkStatus();
}

Result<KeySnapshot> ReadKeys(const KeyTableData& table, int attempts) {
  KeySnapshot snapshot;
  for (int i = 0; i < attempts; ++i) {
    uint64_t before = table.sequence.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      uint32_t count = std::min(table.count, kMaxKeys);
      snapshot.keys.resize(count);
      for (uint32_t k = 0; k < count; ++k) {
        std::memcpy(snapshot.keys[k].digest.data(), table.keys[k].digest, 32);
        snapshot.keys[k].tenant = table.keys[k].tenant;
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (table.sequence.load(std::memory_order_relaxed) == before) {
        snapshot.sequence = before;
        return snapshot;
      }
    }
    if (i % 64 == 63) {
      std::this_thread::yield();
    }
  }
  return Unavailable("the API key table is being written and never settled");
}

}  // namespace ferry::shm
