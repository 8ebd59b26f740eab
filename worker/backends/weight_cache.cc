#include "worker/backends/weight_cache.h"

#include <algorithm>
#include <chrono>

namespace ferry {

HostWeightArena::HostWeightArena(uint64_t capacity, uint64_t alignment)
    : extents_(capacity / alignment * alignment, alignment),
      memory_(capacity / alignment * alignment) {}

std::optional<uint64_t> ByteBudget::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > capacity_ - in_use_) {
    return std::nullopt;
  }
  in_use_ += bytes;
  allocated_[next_] = bytes;
  return next_++;
}

void ByteBudget::Free(uint64_t offset) {
  auto it = allocated_.find(offset);
  if (it != allocated_.end()) {
    in_use_ -= it->second;
    allocated_.erase(it);
  }
}

WeightCache::WeightCache(WeightArena* arena, ResidencyMode mode, int64_t compaction_interval)
    : arena_(arena), mode_(mode), compaction_interval_(compaction_interval) {}

void WeightCache::Register(int index, std::string name, uint64_t bytes, Residency floor,
                           Loader loader, Releaser release) {
  if (models_.size() <= static_cast<size_t>(index)) {
    models_.resize(static_cast<size_t>(index) + 1);
  }
  Entry& entry = models_[static_cast<size_t>(index)];
  entry.name = std::move(name);
  entry.bytes = bytes;
  entry.floor = floor;
  entry.loader = std::move(loader);
  entry.release = std::move(release);
}

void WeightCache::Remove(int index) {
  Entry& entry = models_[static_cast<size_t>(index)];
  if (entry.resident) {
    Release(entry.bytes, entry.offset);
    entry.resident = false;
  }
  entry = Entry{};
  entry.name = "-";
  entry.floor = Residency::kOnDemand;
  entry.loader = [](uint64_t) { return NotFound("the model was unloaded"); };
}

void WeightCache::Evict(int index) {
  Entry& entry = models_[static_cast<size_t>(index)];
  if (entry.resident && entry.floor != Residency::kPinned) {
    Evict(entry);
  }
}

Status WeightCache::Load(Entry& entry) {
  // A model without weights (a reshape-only program) takes no extent: the arena refuses
  // 0-byte allocations, and treating that as "does not fit" would evict every other model.
  std::optional<uint64_t> offset =
      entry.bytes == 0 ? std::optional<uint64_t>(0) : arena_->Allocate(entry.bytes);
  if (!offset) {
    return ResourceExhausted("weights of '" + entry.name + "' (" + std::to_string(entry.bytes) +
                             " bytes) do not fit");
  }
  auto start = std::chrono::steady_clock::now();
  Status uploaded = entry.loader(*offset);
  stats_.load_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!uploaded.ok()) {
    Release(entry.bytes, *offset);
    return uploaded;
  }
  entry.resident = true;
  entry.offset = *offset;
  entry.last_use = ++clock_;
  ++stats_.loads;
  return OkStatus();
}

void WeightCache::Release(uint64_t bytes, uint64_t offset) {
  if (bytes > 0) {
    arena_->Free(offset);
  }
}

void WeightCache::Evict(Entry& entry) {
  Release(entry.bytes, entry.offset);
  entry.resident = false;
  ++stats_.evictions;
  if (entry.release) {
    entry.release();
  }
}

WeightCache::Entry* WeightCache::Victim(const Entry& keep) {
  // Within a tier, models with no work waiting go first (least recent first); one whose
  // requests wait only when no idle one is left.
  for (Residency tier : {Residency::kOnDemand, Residency::kWarm}) {
    for (bool spare_busy : {true, false}) {
      Entry* victim = nullptr;
      for (size_t i = 0; i < models_.size(); ++i) {
        Entry& e = models_[i];
        if (&e == &keep || !e.resident || e.floor != tier ||
            (spare_busy && has_work_ && has_work_(static_cast<int>(i)))) {
          continue;
        }
        if (victim == nullptr || e.last_use < victim->last_use) {
          victim = &e;
        }
      }
      if (victim != nullptr) {
        return victim;
      }
    }
  }
  return nullptr;
}

Status WeightCache::LoadAtStart() {
  for (Entry& e : models_) {
    if (e.floor == Residency::kPinned && !e.resident) {
      Status loaded = Load(e);
      if (!loaded.ok()) {
        return ResourceExhausted("pinned model '" + e.name + "': " + loaded.error().message +
                                 " in the " + std::to_string(arena_->capacity()) +
                                 "-byte weight arena");
      }
    }
  }
  for (Entry& e : models_) {
    if (e.floor == Residency::kWarm && !e.resident) {
      (void)Load(e);  // Best effort: a warm model that does not fit loads on demand later.
    }
  }
  return OkStatus();
}

Result<double> WeightCache::Acquire(int index) {
  Entry& entry = models_[static_cast<size_t>(index)];
  if (entry.resident) {
    entry.last_use = ++clock_;
    return 0.0;
  }
  if (entry.bytes > arena_->capacity()) {
    return ResourceExhausted("weights of '" + entry.name + "' (" + std::to_string(entry.bytes) +
                             " bytes) exceed the weight arena (" +
                             std::to_string(arena_->capacity()) + " bytes)");
  }
  double before = stats_.load_seconds;
  bool compacted = false;
  for (;;) {
    Status loaded = Load(entry);
    if (loaded.ok()) {
      break;
    }
    if (loaded.error().code != ErrorCode::kResourceExhausted) {
      return loaded.error();  // The upload itself failed.
    }
    // Enough bytes free but no extent large enough: defragment once before evicting.
    if (!compacted && arena_->capacity() - arena_->in_use() >= entry.bytes) {
      FERRY_RETURN_IF_ERROR(Compact(ResidentByRecency()));
      compacted = true;
      continue;
    }
    Entry* victim = Victim(entry);
    if (victim == nullptr) {
      return ResourceExhausted("weights of '" + entry.name + "' (" + std::to_string(entry.bytes) +
                               " bytes) do not fit beside the pinned models");
    }
    Evict(*victim);
    compacted = false;  // The new hole may again be split from the others.
  }
  ++stats_.on_demand_loads;
  if (compaction_interval_ > 0 &&
      ++loads_since_compaction_ >= static_cast<uint64_t>(compaction_interval_)) {
    FERRY_RETURN_IF_ERROR(Compact(ResidentByRecency()));
  }
  return stats_.load_seconds - before;
}

std::vector<int> WeightCache::ResidentByRecency() const {
  std::vector<int> resident;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].resident && models_[i].floor != Residency::kPinned) {
      resident.push_back(static_cast<int>(i));
    }
  }
  // Least recent first, so reloading keeps the recency order.
  std::sort(resident.begin(), resident.end(), [this](int a, int b) {
    return models_[static_cast<size_t>(a)].last_use < models_[static_cast<size_t>(b)].last_use;
  });
  return resident;
}

Status WeightCache::Compact(const std::vector<int>& reload) {
  for (Entry& e : models_) {
    if (e.resident && e.floor != Residency::kPinned) {
      Release(e.bytes, e.offset);
      e.resident = false;
      if (e.release) {
        e.release();
      }
    }
  }
  ++stats_.compactions;
  loads_since_compaction_ = 0;
  for (int index : reload) {
    Entry& e = models_[static_cast<size_t>(index)];
    if (!e.resident) {
      (void)Load(e);  // Those that do not fit load on demand later.
    }
  }
  return OkStatus();
}

Status WeightCache::SetResidency(int index, Residency floor) {
  if (mode_ != ResidencyMode::kExternal) {
    return InvalidArgument(
        "set_residency: the worker manages residency itself "
        "(residency_mode = \"managed\")");
  }
  return SetFloor(index, floor);
}

Status WeightCache::SetFloor(int index, Residency floor) {
  Entry& entry = models_[static_cast<size_t>(index)];
  entry.floor = floor;
  if (floor != Residency::kOnDemand && !entry.resident) {
    Result<double> loaded = Acquire(index);
    if (!loaded.ok()) {
      return loaded.error();
    }
  }
  return OkStatus();
}

}  // namespace ferry
