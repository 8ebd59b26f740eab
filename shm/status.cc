#include "shm/status.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

namespace ferry::shm {

std::string_view ProcessStateName(ProcessState state) {
  switch (state) {
    case ProcessState::kStarting:
      return "starting";
    case ProcessState::kReady:
      return "ready";
    case ProcessState::kDraining:
      return "draining";
    case ProcessState::kStopped:
      return "stopped";
    case ProcessState::kUnhealthy:
      return "unhealthy";
  }
  return "unknown";
}

namespace {

constexpr size_t kFixedBytes = offsetof(StatusSnapshotData, models);

// The bytes of a snapshot listing `num_models` models: the fixed part and those entries. The
// rest of `models` is neither written nor read (readers look only at the first num_models).
size_t UsedBytes(uint32_t num_models) {
  return kFixedBytes + std::min(num_models, kMaxStatusModels) * sizeof(ModelStatusData);
}

}  // namespace

StatusWriter::StatusWriter(const Segment& segment, uint32_t slot)
    : data_(&segment.status(slot)),
      sequence_(data_->sequence.load(std::memory_order_relaxed) & ~uint64_t{1}) {}

void StatusWriter::Publish(const StatusSnapshotData& snapshot) {
  data_->sequence.store(sequence_ + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(&data_->snapshot, &snapshot, UsedBytes(snapshot.num_models));
  sequence_ += 2;
  data_->sequence.store(sequence_, std::memory_order_release);
}

Result<StatusSnapshotData> ReadStatus(const Segment& segment, uint32_t slot, int attempts) {
  const StatusData& data = segment.status(slot);
  StatusSnapshotData copy;
  for (int i = 0; i < attempts; ++i) {
    uint64_t before = data.sequence.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      // The fixed part, then the entries it counts (a count that lies is bounded; one torn
      // by the writer is caught by the sequence below).
      std::memcpy(&copy, &data.snapshot, kFixedBytes);
      std::memcpy(copy.models, data.snapshot.models, UsedBytes(copy.num_models) - kFixedBytes);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (data.sequence.load(std::memory_order_relaxed) == before) {
        // Strings come from another process: terminate them whatever it wrote.
        uint32_t models = copy.num_models < kMaxStatusModels ? copy.num_models : kMaxStatusModels;
        copy.num_models = models;
        for (uint32_t m = 0; m < models; ++m) {
          copy.models[m].name[sizeof(copy.models[m].name) - 1] = '\0';
          copy.models[m].wire_batch_input[sizeof(copy.models[m].wire_batch_input) - 1] = '\0';
          copy.models[m].error[sizeof(copy.models[m].error) - 1] = '\0';
        }
        return copy;
      }
    }
    if (i % 64 == 63) {
      std::this_thread::yield();
    }
  }
  return Unavailable("status of slot " + std::to_string(slot) +
                     " is being written and never settled (its writer died mid-write?)");
}

Result<StatusSnapshotData> ReadSettledStatus(const Segment& segment, uint32_t slot,
                                             int64_t patience_ns) {
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(patience_ns);
  while (true) {
    Result<StatusSnapshotData> s = ReadStatus(segment, slot, 64);
    if (s.ok() || std::chrono::steady_clock::now() >= until) {
      return s;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

uint64_t ReadHeartbeat(const Segment& segment, uint32_t slot) {
  return segment.status(slot).heartbeat.load(std::memory_order_relaxed);
}

std::optional<uint32_t> ReadFaultModel(const Segment& segment, uint32_t slot) {
  Result<StatusSnapshotData> read = ReadStatus(segment, slot, 16);
  if (!read.ok() || read->fault_model == 0) {
    return std::nullopt;
  }
  return read->fault_model - 1;
}

std::string ReadStartError(const Segment& segment, uint32_t slot) {
  Result<StatusSnapshotData> read = ReadStatus(segment, slot, 16);
  if (!read.ok()) {
    return "";
  }
  const char* text = read->start_error;
  std::string out(text, strnlen(text, sizeof(read->start_error)));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) {
      c = '?';
    }
  }
  return out;
}

}  // namespace ferry::shm
