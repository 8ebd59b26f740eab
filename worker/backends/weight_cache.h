// The weight cache: which models' weights are resident in device memory, with residency
// floors per model.
//   pinned     loaded at start, never evicted;
//   warm       loaded at start (when it fits), evictable under pressure;
//   on_demand  loaded at first use, evicted least-recently-used.
// Loading makes room by evicting on_demand models, least recently used first (those with no
// work waiting before those with some, when told which have), then warm ones; whenever enough bytes
// are free but no extent is large enough, the cache first compacts (frees every non-pinned model
// and reloads them packed) rather than evict more. Load time is returned apart so it never enters
// the learned compute cost. Compact(reload) frees non-pinned weights and reloads the listed models
// to defragment the arena; with compaction_interval N the cache compacts by itself every N
// on-demand loads. SetResidency moves a model's floor, only in externally-managed mode.
//
// Written against WeightArena so every rule is tested on host memory; the CUDA backend
// supplies a device arena.
//
// Thread safety: requires external synchronization (the dispatch loop owns it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/extent_allocator.h"
#include "common/result.h"
#include "config/scheduler_config.h"

namespace ferry {

// Memory that holds weights, addressed by offset.
class WeightArena {
 public:
  virtual ~WeightArena() = default;
  virtual uint64_t capacity() const = 0;
  // nullopt when no free extent of `bytes` exists.
  virtual std::optional<uint64_t> Allocate(uint64_t bytes) = 0;
  virtual void Free(uint64_t offset) = 0;
  virtual uint64_t in_use() const = 0;
};

// Host memory standing in for a device arena (tests, CPU workers).
class HostWeightArena : public WeightArena {
 public:
  explicit HostWeightArena(uint64_t capacity, uint64_t alignment = 256);
  uint64_t capacity() const override { return extents_.capacity(); }
  std::optional<uint64_t> Allocate(uint64_t bytes) override { return extents_.Allocate(bytes); }
  void Free(uint64_t offset) override { extents_.Free(offset); }
  uint64_t in_use() const override { return extents_.in_use(); }
  uint64_t largest_free() const { return extents_.largest_free(); }
  std::span<uint8_t> Bytes(uint64_t offset, uint64_t bytes) {
    return {memory_.data() + offset, bytes};
  }

 private:
  ExtentAllocator extents_;
  std::vector<uint8_t> memory_;
};

// A budget of bytes with no memory behind it: for weights whose memory the backend allocates
// itself (a CPU worker's heap), where only the total counts and nothing fragments.
class ByteBudget : public WeightArena {
 public:
  explicit ByteBudget(uint64_t capacity) : capacity_(capacity) {}
  uint64_t capacity() const override { return capacity_; }
  std::optional<uint64_t> Allocate(uint64_t bytes) override;
  void Free(uint64_t offset) override;
  uint64_t in_use() const override { return in_use_; }

 private:
  uint64_t capacity_;
  uint64_t in_use_ = 0;
  uint64_t next_ = 0;                       // Offsets are tickets, handed out once.
  std::map<uint64_t, uint64_t> allocated_;  // Ticket -> bytes.
};

struct WeightCacheStats {
  uint64_t loads = 0;
  uint64_t on_demand_loads = 0;
  uint64_t evictions = 0;
  uint64_t compactions = 0;
  double load_seconds = 0;
};

class WeightCache {
 public:
  // Uploads the model's weights into the arena at `offset` (bytes as registered).
  using Loader = std::function<Status(uint64_t offset)>;
  // Told when the model stops being resident (evicted, compacted, set on_demand or removed).
  using Releaser = std::function<void()>;

  WeightCache(WeightArena* arena, ResidencyMode mode, int64_t compaction_interval);

  // Registers model `index` (dense, from 0) before LoadAtStart.
  void Register(int index, std::string name, uint64_t bytes, Residency floor, Loader loader,
                Releaser release = {});
  // An unloaded model: its bytes leave the arena and it is never loaded again.
  void Remove(int index);
  // Frees a resident non-pinned model now (ferryctl set-residency on_demand; a load that
  // failed after its room was made). Counts an eviction.
  void Evict(int index);
  // Loads every pinned model (each must fit: RESOURCE_EXHAUSTED naming it otherwise), then
  // the warm ones that fit.
  Status LoadAtStart();
  // Makes the model resident (loading and evicting as needed) and marks it most recently
  // used. Returns the seconds spent loading (0 when it was resident). RESOURCE_EXHAUSTED
  // when it cannot fit even after evicting everything evictable; the loader's error if the
  // upload failed (the model is then not resident).
  Result<double> Acquire(int index);
  // Whether model `index` has work waiting: such models are evicted only after the idle
  // ones of their tier (unset: none has).
  void SetHasWork(std::function<bool(int)> has_work) { has_work_ = std::move(has_work); }
  // Frees every non-pinned model, then reloads `reload` in order (those that fit).
  Status Compact(const std::vector<int>& reload);
  // INVALID_ARGUMENT unless externally managed. pinned and warm load now; on_demand only
  // lowers the floor.
  Status SetResidency(int index, Residency floor);
  // SetResidency without the mode check, for a caller that checked it (the scheduler).
  Status SetFloor(int index, Residency floor);
  // Resident non-pinned models, least recently used first.
  std::vector<int> ResidentByRecency() const;
  uint64_t free_bytes() const { return arena_->capacity() - arena_->in_use(); }
  uint64_t capacity() const { return arena_->capacity(); }

  bool resident(int index) const { return models_[static_cast<size_t>(index)].resident; }
  uint64_t offset(int index) const { return models_[static_cast<size_t>(index)].offset; }
  Residency floor(int index) const { return models_[static_cast<size_t>(index)].floor; }
  const WeightCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::string name;
    uint64_t bytes = 0;
    Residency floor = Residency::kWarm;
    Loader loader;
    Releaser release;
    bool resident = false;
    uint64_t offset = 0;
    uint64_t last_use = 0;
  };
  Status Load(Entry& entry);
  void Release(uint64_t bytes, uint64_t offset);  // Frees the extent, if it has one.
  void Evict(Entry& entry);
  // The next model to evict for `keep`'s sake: on_demand LRU first, then warm LRU.
  Entry* Victim(const Entry& keep);

  WeightArena* arena_;
  ResidencyMode mode_;
  int64_t compaction_interval_;
  std::vector<Entry> models_;
  std::function<bool(int)> has_work_;
  uint64_t clock_ = 0;
  uint64_t loads_since_compaction_ = 0;
  WeightCacheStats stats_;
};

}  // namespace ferry
