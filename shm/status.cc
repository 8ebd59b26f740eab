#include "shm/status.h"

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

StatusWriter::StatusWriter(const Segment& segment, uint32_t slot)
    : data_(&segment.status(slot)),
      sequence_(data_->sequence.load(std::memory_order_relaxed) & ~uint64_t{1}) {}

void StatusWriter::Publish(const StatusSnapshotData& snapshot) {
  data_->sequence.store(sequence_ + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(&data_->snapshot, &snapshot, sizeof(snapshot));
  sequence_ += 2;
  data_->sequence.store(sequence_, std::memory_order_release);
}

Result<StatusSnapshotData> ReadStatus(const Segment& segment, uint32_t slot, int attempts) {
  const StatusData& data = segment.status(slot);
  StatusSnapshotData copy;
  for (int i = 0; i < attempts; ++i) {
    uint64_t before = data.sequence.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      std::memcpy(&copy, &data.snapshot, sizeof(copy));
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

uint64_t ReadHeartbeat(const Segment& segment, uint32_t slot) {
  return segment.status(slot).heartbeat.load(std::memory_order_relaxed);
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
