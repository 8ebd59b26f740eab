// The choice of worker for a request ([gateway] mode), from the workers' status snapshots.
//
// Eligibility first: the worker is ready (not starting, draining, stopped or unhealthy), has
// the model loaded without error, its queue for the model is not full and its arena can take
// the request's outputs. Among the eligible, responsive workers (whose heartbeat advanced
// within HookHostOptions::stall_ns) are preferred over stalled ones (stopped by SIGSTOP, a
// debugger, a machine swapping, or inside one very long execution): a stalled worker is sent
// requests only when no responsive one can take them, so one stopped worker does not stop
// the node. Then workers where the model's weights are resident are preferred over ones that
// would have to load them. Then the mode:
//  - round_robin: the next eligible worker after the last one chosen;
//  - least_outstanding: the fewest requests queued or executing (ties rotate);
//  - lpt_packing: each model is placed on one worker by longest-processing-time-first packing
//    of its measured load (Repack), and served there while that worker is eligible; when it
//    is not, least_outstanding among the others.
// No eligible worker: UNAVAILABLE when none is ready or none has the model, RESOURCE_EXHAUSTED
// when every one that has it is full, each with the reason and a retry hint.
//
// Thread safety: requires external synchronization (one owner: the hook host's transport).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/node_config.h"

namespace ferry::hookhost {

// One worker as the gateway sees it, for one model.
struct WorkerView {
  bool ready = false;      // Serving (ProcessState::kReady).
  bool has_model = false;  // The model loaded there (not failed).
  bool resident = false;   // Its weights are on the device now.
  bool responsive = true;  // Its heartbeat advanced lately (not stalled).
  uint64_t queue_depth = 0;
  uint64_t max_queue_depth = 0;  // The model's limit on that worker.
  uint64_t outstanding = 0;      // Queued or executing there, counting what was just sent.
  uint64_t arena_free = 0;       // Bytes free in the worker's arena.
  std::string failure;           // Why the model failed to load there (empty: it did not fail).
};

// How long a client is told to wait before retrying when every worker is full.
inline constexpr int64_t kRetryAfterMs = 100;

class Gateway {
 public:
  Gateway(GatewayMode mode, size_t num_models);

  // The index into `workers` to send a request of `model` to; `output_bytes` is what its
  // outputs take in the worker's arena. REQUIRES: 0 <= model < num_models.
  Result<size_t> Choose(int model, std::string_view model_name, uint64_t output_bytes,
                        std::span<const WorkerView> workers);

  // The worker that holds sequence `key` (a tenant's sequence id, hashed by the caller) of a
  // stateful model: rendezvous hashing of (key, worker slot) over the workers where the model
  // did not fail, so every hook host picks the same one and a worker leaving moves only its
  // own sequences. `slots[w]` is workers[w]'s segment slot. That worker must take it: not
  // ready, without the model or full, the request is refused as Choose refuses (the state
  // is there and nowhere else). REQUIRES: slots.size() == workers.size().
  static Result<size_t> ChooseForSequence(std::string_view model_name, uint64_t key,
                                          uint64_t output_bytes,
                                          std::span<const WorkerView> workers,
                                          std::span<const uint32_t> slots);

  // lpt_packing: places every model on one of `num_workers` workers, heaviest first, each on
  // the worker with the least load placed so far (ties: fewer models, then the lowest index).
  // `load[m]` is model m's measured GPU time per second.
  void Repack(std::span<const double> load, size_t num_workers);
  // The worker model m is placed on (lpt_packing), or -1 before the first Repack.
  int placed(int model) const { return placement_[static_cast<size_t>(model)]; }

 private:
  size_t LeastOutstanding(std::span<const WorkerView> workers,
                          const std::vector<size_t>& candidates);

  GatewayMode mode_;
  std::vector<int> placement_;
  size_t cursor_ = 0;  // Where round_robin and ties resume.
};

}  // namespace ferry::hookhost
