// The node's API key digests in shared memory: written by ferryd (at start and on reload)
// into its own object, read by the hook hosts, which map it read-only and cannot open the
// keys files from inside their sandbox. Each entry is a key's SHA-256 digest and its tenant
// (docs/security.md).
//
// Seqlock, as shm/status.h: the writer makes `sequence` odd, writes, makes it even again; a
// reader keeps a copy only when it read the same even sequence before and after.
//
// Thread safety: one writer (ferryd's thread); readers anywhere. Process safety: only the
// supervisor's mapping is writable.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "common/result.h"

namespace ferry::shm {

inline constexpr uint32_t kMaxKeys = 4096;

struct KeyEntry {
  std::array<uint8_t, 32> digest{};
  uint32_t tenant = 0;  // The node's tenant number (1-based: frontend.tenants' order).
  bool operator==(const KeyEntry&) const = default;
};

struct KeyEntryData {
  uint8_t digest[32];
  uint32_t tenant;
  uint32_t reserved;
};

struct KeyTableData {
  std::atomic<uint64_t> sequence;  // Even: stable; odd: being written.
  uint32_t count;
  uint32_t reserved;
  KeyEntryData keys[kMaxKeys];
};

// REQUIRES: the caller is the table's only writer; keys.size() <= kMaxKeys (INVALID_ARGUMENT
// otherwise, and nothing is written).
Status PublishKeys(KeyTableData& table, const std::vector<KeyEntry>& keys);

// The table as last published, with the sequence it was read at. UNAVAILABLE when no
// consistent copy could be read in `attempts` tries. A count past kMaxKeys reads as kMaxKeys.
struct KeySnapshot {
  uint64_t sequence = 0;
  std::vector<KeyEntry> keys;
};
Result<KeySnapshot> ReadKeys(const KeyTableData& table, int attempts = 1000);

// The current sequence: a reader holding a snapshot at this sequence is up to date.
inline uint64_t KeysSequence(const KeyTableData& table) {
  return table.sequence.load(std::memory_order_acquire);
}

}  // namespace ferry::shm
