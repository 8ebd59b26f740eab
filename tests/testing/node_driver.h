// A hook host's side of the worker protocol, for tests and benchmarks that drive a real
// ferry-worker process: inputs are written into this slot's arena, submissions pushed on the
// submission ring, completions read (outputs copied out on request) and released. Also
// starting and stopping a worker process the way ferryd does (fork + exec, control ring).
//
// Thread safety: a NodeDriver belongs to one thread of one process.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "model/manifest.h"
#include "shm/arena.h"
#include "shm/control.h"
#include "shm/descriptor.h"
#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/status.h"

namespace ferry::testing {

struct TensorInput {
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const uint8_t> bytes;
};

struct Completion {
  uint64_t sequence = 0;
  uint32_t status = 0;                        // 0 ok, else ErrorCode + 1.
  std::string message;                        // For an error.
  std::vector<std::vector<uint8_t>> outputs;  // Copied when the driver copies outputs.
  std::vector<Shape> shapes;
  int64_t submitted_ns = 0;
  int64_t completed_ns = 0;  // When this driver read it.
  uint32_t worker_generation = 0;
  int32_t batch_size = 0;   // What the worker reported: the compiled size it ran in,
  uint32_t queue_us = 0;    //   its time queued,
  uint32_t compute_us = 0;  //   and its batch's execution.
  ErrorCode code() const { return static_cast<ErrorCode>(status - 1); }
};

class NodeDriver {
 public:
  NodeDriver(const shm::Segment& segment, uint32_t hookhost, bool copy_outputs = true)
      : segment_(segment),
        slot_(segment.HookhostSlot(hookhost)),
        worker_slot_(segment.WorkerSlot(0)),
        generation_(segment.generation(slot_).load()),
        copy_outputs_(copy_outputs),
        arena_(segment, slot_),
        submit_(segment, segment.SubmissionRing(hookhost, 0)),
        complete_(segment, segment.CompletionRing(0, hookhost)) {}

  // The sequence number, or RESOURCE_EXHAUSTED (arena) / UNAVAILABLE (ring full).
  Result<uint64_t> Submit(uint32_t model, int variant, int64_t rows,
                          const std::vector<TensorInput>& inputs, int64_t deadline_ns = 0,
                          uint32_t meta = 0, uint32_t priority = 0, uint32_t tenant = 0,
                          uint64_t sequence_id = 0, uint8_t sequence_flags = 0) {
    FlushReleases();
    shm::DescriptorData d = Addressed(shm::DescriptorKind::kSubmit, next_sequence_, model);
    d.sequence_id = sequence_id;
    d.sequence_flags = sequence_flags;
    d.variant = variant;
    d.rows = static_cast<int32_t>(rows);
    d.deadline_ns = deadline_ns;
    d.meta = meta;
    d.priority = static_cast<uint8_t>(priority);
    d.tenant = static_cast<uint16_t>(tenant);
    d.num_tensors = static_cast<uint8_t>(inputs.size());
    std::vector<uint64_t> blocks;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Result<shm::Block> block = arena_.Allocate(std::max<size_t>(inputs[i].bytes.size(), 1));
      if (!block.ok()) {
        for (uint64_t b : blocks) {
          (void)arena_.Free(b);
        }
        return block.error();
      }
      blocks.push_back(block->offset);
      std::memcpy(arena_.Bytes(*block).data(), inputs[i].bytes.data(), inputs[i].bytes.size());
      d.tensors[i] = shm::MakeTensorRef(slot_, block->offset, inputs[i].bytes.size(),
                                        inputs[i].dtype, inputs[i].shape);
    }
    return Push(d, std::move(blocks));
  }

  // Asks the worker to drop request `sequence` of `model` if it is still queued (kCancel).
  bool Cancel(uint32_t model, uint64_t sequence) {
    return submit_.TryPush(Addressed(shm::DescriptorKind::kCancel, sequence, model)) ==
           shm::RingStatus::kOk;
  }

  // A descriptor of `kind` for request `sequence` of `model`, from this driver's incarnation.
  shm::DescriptorData Addressed(shm::DescriptorKind kind, uint64_t sequence, uint32_t model) const {
    shm::DescriptorData d{};
    d.kind = static_cast<uint16_t>(kind);
    d.slot = slot_;
    d.generation = generation_;
    d.sender_generation = generation_;
    d.sequence = sequence;
    d.model = static_cast<uint16_t>(model);
    return d;
  }

  // Pushes a descriptor as given (hostile tests); `blocks` are freed when it completes.
  Result<uint64_t> Push(shm::DescriptorData d, std::vector<uint64_t> blocks = {}) {
    d.sequence = next_sequence_;
    int64_t submitted = MonotonicNs();  // Before the push: the worker may start at once.
    if (submit_.TryPush(d) != shm::RingStatus::kOk) {
      for (uint64_t b : blocks) {
        (void)arena_.Free(b);
      }
      return Unavailable("submission ring full");
    }
    inflight_[next_sequence_] = {std::move(blocks), submitted};
    return next_sequence_++;
  }

  // Reads every completion waiting; releases their blocks.
  void Poll(std::vector<Completion>* out) {
    shm::DescriptorRules rules{
        slot_, 0, {worker_slot_}, segment_.partition_bytes(), shm::kCompletionRingKinds};
    shm::DescriptorData d{};
    while (complete_.TryPop(&d) == shm::RingStatus::kOk) {
      if (!shm::ValidateDescriptor(d, rules).ok() || d.generation != generation_) {
        ++invalid_completions_;
        continue;
      }
      auto it = inflight_.find(d.sequence);
      if (it == inflight_.end()) {
        ++invalid_completions_;
        continue;
      }
      Completion c;
      c.sequence = d.sequence;
      c.status = d.status;
      c.submitted_ns = it->second.submitted_ns;
      c.completed_ns = MonotonicNs();
      c.worker_generation = d.sender_generation;
      c.batch_size = d.batch_size;
      c.queue_us = d.timing.queue_us;
      c.compute_us = d.timing.compute_us;
      // Seqlock-style read of the worker's arena (recovery.h): bytes read while a successor
      // could have written them are not trusted.
      bool current = shm::IsCurrent(segment_, worker_slot_, d.sender_generation);
      for (uint32_t t = 0; current && t < d.num_tensors; ++t) {
        std::span<uint8_t> bytes = shm::TensorBytes(segment_, d.tensors[t]);
        if (d.status != 0) {
          c.message.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        } else if (copy_outputs_) {
          c.outputs.emplace_back(bytes.begin(), bytes.end());
          c.shapes.emplace_back(d.tensors[t].shape, d.tensors[t].shape + d.tensors[t].rank);
        } else {
          volatile uint8_t touch = bytes.empty() ? 0 : bytes[0];  // The payload is read.
          (void)touch;
        }
      }
      if (!current || !shm::StillCurrent(segment_, worker_slot_, d.sender_generation)) {
        c.status = static_cast<uint32_t>(ErrorCode::kUnavailable) + 1;
        c.message = "the worker restarted while its outputs were read";
        c.outputs.clear();
        c.shapes.clear();
      }
      for (uint64_t b : it->second.blocks) {
        (void)arena_.Free(b);
      }
      inflight_.erase(it);
      shm::DescriptorData release = d;
      release.kind = static_cast<uint16_t>(shm::DescriptorKind::kRelease);
      release.sender_generation = generation_;
      releases_.push_back(release);
      out->push_back(std::move(c));
    }
    FlushReleases();
  }

  // Sleeps on this slot's doorbell until a completion waits (or the timeout).
  void Wait(int64_t timeout_ns, int spin_iterations = 2000) {
    shm::WaitForWork(
        segment_, slot_, [this] { return complete_.HasWork(); }, timeout_ns, spin_iterations);
  }

  size_t inflight() const { return inflight_.size(); }
  uint64_t invalid_completions() const { return invalid_completions_; }
  uint32_t slot() const { return slot_; }
  shm::Arena& arena() { return arena_; }

 private:
  struct InFlight {
    std::vector<uint64_t> blocks;
    int64_t submitted_ns;
  };
  void FlushReleases() {
    while (!releases_.empty() && submit_.TryPush(releases_.front()) == shm::RingStatus::kOk) {
      releases_.pop_front();
    }
  }

  const shm::Segment& segment_;
  uint32_t slot_;
  uint32_t worker_slot_;
  uint32_t generation_;
  bool copy_outputs_;
  shm::Arena arena_;
  shm::RingProducer submit_;
  shm::RingConsumer complete_;
  uint64_t next_sequence_ = 1;
  std::unordered_map<uint64_t, InFlight> inflight_;
  std::deque<shm::DescriptorData> releases_;
  uint64_t invalid_completions_ = 0;
};

// Starts `binary` as the worker of `slot` (fork + exec, as ferryd does). Returns its pid.
inline pid_t StartWorker(const std::string& binary, const std::string& segment, uint32_t slot,
                         const std::string& config) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string slot_text = std::to_string(slot);
    execl(binary.c_str(), binary.c_str(), "--segment", segment.c_str(), "--slot", slot_text.c_str(),
          "--config", config.c_str(), "--log-level", "warn", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits until the worker in `slot` reports ready; false when it exits or the time runs out.
inline bool WaitReady(const shm::Segment& segment, uint32_t slot, pid_t pid, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    Result<shm::StatusSnapshotData> s = shm::ReadStatus(segment, slot);
    if (s.ok() && s->state == static_cast<uint32_t>(shm::ProcessState::kReady)) {
      return true;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Sends a control command on the worker's control ring, as ferryd does.
inline bool SendControl(const shm::Segment& segment, uint32_t slot,
                        const shm::ControlMessage& message) {
  static uint64_t sequence = 1;
  shm::RingProducer control(segment, segment.ControlRing(slot));
  return control.TryPush(shm::EncodeControl(message, sequence++)) == shm::RingStatus::kOk;
}

// Stops the worker through its control ring and returns its exit status (-1 on timeout,
// after which it is killed).
inline int StopWorker(const shm::Segment& segment, uint32_t slot, pid_t pid, int timeout_s = 30) {
  SendControl(segment, slot, {shm::ControlCode::kStop, 0, 0, 0});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

}  // namespace ferry::testing
