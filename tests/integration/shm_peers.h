// Minimal hook-host and worker peers speaking ferry's shared-memory protocol, for the crash
// tests and the benchmarks: submissions carry an input block in the hook host's arena; the
// worker reads it in place, writes an 8-byte checksum into a block of its own arena and
// completes; the hook host checks the checksum and sends a release for the output block.
// Both sides are non-blocking with local backlogs, so neither can deadlock on a full ring.
//
// Thread safety: each peer object belongs to one thread of one process.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "shm/arena.h"
#include "shm/descriptor.h"
#include "shm/recovery.h"
#include "shm/ring.h"

namespace ferry::testing {

inline uint64_t Checksum(std::span<const uint8_t> bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (uint8_t b : bytes) {
    h = (h ^ b) * 1099511628211ULL;
  }
  return h;
}

inline constexpr uint32_t kStopCommand = 1;

class TestHookHost {
 public:
  TestHookHost(const shm::Segment& segment, uint32_t hookhost)
      : segment_(segment),
        slot_(segment.HookhostSlot(hookhost)),
        worker_slot_(segment.WorkerSlot(0)),
        generation_(segment.generation(slot_).load()),
        arena_(segment, slot_),
        submit_(segment, segment.SubmissionRing(hookhost, 0)),
        complete_(segment, segment.CompletionRing(0, hookhost)),
        rng_(slot_ * 7919 + generation_) {}

  // Submits one request of random size, unless the window or the arena is full.
  bool Submit(size_t window) {
    if (inflight_.size() >= window) {
      return false;
    }
    std::uniform_int_distribution<uint64_t> size(1, 64 << 10);
    uint64_t bytes = size(rng_);
    Result<shm::Block> block = arena_.Allocate(bytes);
    if (!block.ok()) {
      return false;
    }
    std::span<uint8_t> data = arena_.Bytes(*block);
    for (auto& b : data) {
      b = static_cast<uint8_t>(rng_());
    }
    shm::DescriptorData d{};
    d.kind = static_cast<uint16_t>(shm::DescriptorKind::kSubmit);
    d.slot = slot_;
    d.generation = generation_;
    d.sender_generation = generation_;
    d.sequence = next_sequence_;
    d.rows = 1;
    d.num_tensors = 1;
    int64_t shape[] = {static_cast<int64_t>(bytes)};
    d.tensors[0] = shm::MakeTensorRef(slot_, block->offset, bytes, DType::kU8, shape);
    uint32_t worker_generation = segment_.generation(worker_slot_).load();
    if (submit_.TryPush(d) != shm::RingStatus::kOk) {
      (void)arena_.Free(block->offset);
      return false;
    }
    inflight_[next_sequence_++] = {*block, Checksum(data), worker_generation};
    ++submitted_;
    return true;
  }

  // Handles completions, fails requests whose worker died, flushes releases.
  void Poll() {
    shm::DescriptorData d{};
    shm::DescriptorRules rules{
        slot_, 0, {worker_slot_}, segment_.partition_bytes(), shm::kCompletionRingKinds};
    while (complete_.TryPop(&d) == shm::RingStatus::kOk) {
      if (!shm::ValidateDescriptor(d, rules).ok()) {
        complete_.CountInvalid();
        continue;
      }
      if (d.generation != generation_) {
        continue;  // Addressed to a dead incarnation of this slot: the worker reaps it.
      }
      auto it = inflight_.find(d.sequence);
      bool worker_alive = shm::IsCurrent(segment_, worker_slot_, d.sender_generation);
      if (d.status == 0 && d.num_tensors == 1 && worker_alive) {
        std::span<uint8_t> out = shm::TensorBytes(segment_, d.tensors[0]);
        uint64_t sum = 0;
        std::memcpy(&sum, out.data(), std::min<size_t>(8, out.size()));
        // Re-check: a worker reset while reading means the bytes cannot be trusted.
        if (it != inflight_.end() &&
            shm::StillCurrent(segment_, worker_slot_, d.sender_generation)) {
          sum == it->second.checksum ? ++completed_ : ++wrong_;
          Resolve(it);
        }
        shm::DescriptorData release = d;
        release.kind = static_cast<uint16_t>(shm::DescriptorKind::kRelease);
        release.slot = slot_;
        release.generation = generation_;
        release.sender_generation = generation_;
        releases_.push_back(release);
      } else if (it != inflight_.end()) {
        d.status != 0 && worker_alive ? ++errors_ : ++unavailable_;
        Resolve(it);
      }
    }
    uint32_t worker_generation = segment_.generation(worker_slot_).load();
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      if (it->second.worker_generation != worker_generation) {
        ++unavailable_;  // Its worker died: fail it (UNAVAILABLE) and reclaim the input.
        (void)arena_.Free(it->second.block.offset);
        it = inflight_.erase(it);
      } else {
        ++it;
      }
    }
    while (!releases_.empty() && submit_.TryPush(releases_.front()) == shm::RingStatus::kOk) {
      releases_.pop_front();
    }
  }

  bool Idle() const { return inflight_.empty() && releases_.empty(); }
  uint64_t submitted() const { return submitted_; }
  uint64_t completed() const { return completed_; }
  uint64_t unavailable() const { return unavailable_; }
  uint64_t wrong() const { return wrong_; }
  uint64_t errors() const { return errors_; }
  uint32_t slot() const { return slot_; }

 private:
  struct InFlight {
    shm::Block block;
    uint64_t checksum;
    uint32_t worker_generation;
  };
  void Resolve(std::unordered_map<uint64_t, InFlight>::iterator it) {
    (void)arena_.Free(it->second.block.offset);
    inflight_.erase(it);
  }

  const shm::Segment& segment_;
  uint32_t slot_;
  uint32_t worker_slot_;
  uint32_t generation_;
  shm::Arena arena_;
  shm::RingProducer submit_;
  shm::RingConsumer complete_;
  std::mt19937_64 rng_;
  uint64_t next_sequence_ = 0;
  std::unordered_map<uint64_t, InFlight> inflight_;
  std::deque<shm::DescriptorData> releases_;
  uint64_t submitted_ = 0, completed_ = 0, unavailable_ = 0, wrong_ = 0, errors_ = 0;
};

class TestWorker {
 public:
  explicit TestWorker(const shm::Segment& segment)
      : segment_(segment),
        slot_(segment.WorkerSlot(0)),
        generation_(segment.generation(slot_).load()),
        arena_(segment, slot_),
        control_(segment, segment.ControlRing(slot_)) {
    for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
      submissions_.emplace_back(segment, segment.SubmissionRing(h, 0));
      completions_.emplace_back(segment, segment.CompletionRing(0, h));
      pending_.emplace_back();
    }
  }

  // One pass over every ring. Returns false once told to stop (after draining and reaping).
  bool Step() {
    for (uint32_t h = 0; h < submissions_.size(); ++h) {
      Drain(h);
    }
    Reap();
    shm::DescriptorData d{};
    if (control_.TryPop(&d) == shm::RingStatus::kOk && d.model == kStopCommand) {
      for (uint32_t h = 0; h < submissions_.size(); ++h) {
        Drain(h);
      }
      Reap();
      return false;
    }
    return true;
  }

  void Sleep(int64_t timeout_ns) {
    shm::WaitForWork(
        segment_, slot_,
        [this] {
          for (const auto& ring : submissions_) {
            if (ring.HasWork()) {
              return true;
            }
          }
          return control_.HasWork();
        },
        timeout_ns);
  }

  uint64_t invalid() const { return invalid_; }

 private:
  void Drain(uint32_t h) {
    uint32_t hook_slot = segment_.HookhostSlot(h);
    // Submissions name the hook host's partition; releases name this worker's own blocks.
    shm::DescriptorRules submit_rules{hook_slot, 1, {hook_slot}, segment_.partition_bytes()};
    shm::DescriptorRules release_rules{hook_slot, 1, {slot_}, segment_.partition_bytes()};
    submit_rules.allowed_kinds = shm::KindBit(shm::DescriptorKind::kSubmit);
    release_rules.allowed_kinds = shm::KindBit(shm::DescriptorKind::kRelease);
    shm::DescriptorData d{};
    while (submissions_[h].TryPop(&d) == shm::RingStatus::kOk) {
      bool release = d.kind == static_cast<uint16_t>(shm::DescriptorKind::kRelease);
      Status valid = shm::ValidateDescriptor(d, release ? release_rules : submit_rules);
      if (!valid.ok()) {
        submissions_[h].CountInvalid();
        ++invalid_;
        Complete(h, d, static_cast<uint32_t>(valid.error().code) + 1, std::nullopt);
        continue;
      }
      if (release) {
        auto it = outstanding_.find({hook_slot, d.generation, d.sequence});
        if (it != outstanding_.end()) {
          (void)arena_.Free(it->second);
          outstanding_.erase(it);
        }
        continue;
      }
      if (!shm::IsCurrent(segment_, hook_slot, d.generation)) {
        continue;  // From a dead incarnation: drop without reading its input.
      }
      if (d.num_tensors != 1) {  // This peer's model has exactly one input.
        Complete(h, d, static_cast<uint32_t>(ErrorCode::kInvalidArgument) + 1, std::nullopt);
        continue;
      }
      uint64_t sum = Checksum(shm::TensorBytes(segment_, d.tensors[0]));
      Result<shm::Block> out = arena_.Allocate(8);
      if (!out.ok()) {
        Complete(h, d, static_cast<uint32_t>(ErrorCode::kResourceExhausted) + 1, std::nullopt);
        continue;
      }
      std::memcpy(arena_.Bytes(*out).data(), &sum, 8);
      outstanding_[{hook_slot, d.generation, d.sequence}] = out->offset;
      Complete(h, d, 0, out->offset);
    }
    auto& pending = pending_[h];
    while (!pending.empty() && completions_[h].TryPush(pending.front()) == shm::RingStatus::kOk) {
      pending.pop_front();
    }
  }

  void Complete(uint32_t h, const shm::DescriptorData& request, uint32_t status,
                std::optional<uint64_t> output) {
    shm::DescriptorData c{};
    c.kind = static_cast<uint16_t>(shm::DescriptorKind::kCompletion);
    c.slot = request.slot;
    c.generation = request.generation;
    c.sequence = request.sequence;
    c.sender_generation = generation_;
    c.status = status;
    if (output) {
      c.num_tensors = 1;
      int64_t shape[] = {8};
      c.tensors[0] = shm::MakeTensorRef(slot_, *output, 8, DType::kU8, shape);
    }
    pending_[h].push_back(c);
  }

  // Frees output blocks whose hook host incarnation died before releasing them.
  void Reap() {
    for (auto it = outstanding_.begin(); it != outstanding_.end();) {
      auto [hook_slot, generation, sequence] = it->first;
      if (!shm::IsCurrent(segment_, hook_slot, generation)) {
        (void)arena_.Free(it->second);
        it = outstanding_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const shm::Segment& segment_;
  uint32_t slot_;
  uint32_t generation_;
  shm::Arena arena_;
  shm::RingConsumer control_;
  std::vector<shm::RingConsumer> submissions_;
  std::vector<shm::RingProducer> completions_;
  std::vector<std::deque<shm::DescriptorData>> pending_;
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, uint64_t> outstanding_;
  uint64_t invalid_ = 0;
};

}  // namespace ferry::testing
