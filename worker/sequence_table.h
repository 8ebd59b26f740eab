// A stateful model's live sequences on one worker (Manifest::sequence; docs/bundles.md,
// "Sequences"): each sequence's state (one row of every state tensor), the one request of it
// that is queued or executing, the requests waiting behind that one, and when it was last
// used.
//
// One request per sequence at a time: a request of a sequence is handed to the scheduler only
// once the sequence's previous request has left (answered, failed or cancelled), so two
// requests of one sequence never share a batch and each sees the state its predecessor left.
// Requests of different sequences batch together, one row each (Triton's direct strategy,
// without slots: any row of any batch may be any sequence).
//
// Sequences are keyed by (tenant, id): a tenant cannot reach another's state.
//
// Thread safety: none; the dispatch loop's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"

namespace ferry::worker {

struct SequenceKey {
  uint16_t tenant = 0;
  uint64_t id = 0;
  bool operator==(const SequenceKey&) const = default;
};

// At most this many requests of one sequence wait behind its current one.
inline constexpr size_t kMaxHeldPerSequence = 64;

class SequenceTable {
 public:
  // REQUIRES: manifest.stateful(); `model` names it in messages.
  SequenceTable(const Manifest& manifest, std::string model);

  // What became of an arriving request.
  enum class Arrival { kRun, kHeld };
  // Request `request` of sequence `key` arrived with `flags` (shm::kSequenceStart/End). kRun:
  // it is the sequence's current request (its state zeroed on a start): hand it to the
  // scheduler. kHeld: it waits behind the current one (Leave hands it over). Refused:
  // INVALID_ARGUMENT for a sequence that is not live without a start; RESOURCE_EXHAUSTED
  // past max_sequences (after dropping idle ones) or kMaxHeldPerSequence.
  Result<Arrival> Arrive(SequenceKey key, uint8_t flags, uint32_t request, int64_t now_ns);

  // What follows the current request leaving: the next request to hand to the scheduler,
  // and requests to fail (they followed an end without starting anew).
  struct Next {
    std::optional<uint32_t> run;
    std::vector<uint32_t> orphans;
  };
  // The current request of `key` left; `flags` were its own. An end drops the sequence once
  // nothing of it waits. REQUIRES: `key` is live with a current request.
  Next Leave(SequenceKey key, uint8_t flags, int64_t now_ns);
  // A held request left before its turn (cancelled; the worker stopping). No-op if not held.
  void Unhold(SequenceKey key, uint32_t request);

  // State `k`'s row for the sequence. REQUIRES: `key` is live. Valid until it is dropped.
  std::span<uint8_t> State(SequenceKey key, size_t k);
  // For manifest input i (output o): the state it is, or -1 for a request's own tensor.
  int InputState(size_t i) const { return input_state_[i]; }
  int OutputState(size_t o) const { return output_state_[o]; }

  // Drops sequences with nothing queued that were last used max_idle_us ago or more.
  // Returns how many.
  size_t Expire(int64_t now_ns);
  // Every held request (the worker stopping): they leave the table.
  std::vector<uint32_t> TakeHeld();
  size_t live() const { return sequences_.size(); }

 private:
  struct KeyHash {
    size_t operator()(const SequenceKey& k) const {
      return std::hash<uint64_t>()(k.id * 0x9e3779b97f4a7c15ULL ^ k.tenant);
    }
  };
  struct Sequence {
    std::vector<std::vector<uint8_t>> state;  // One row per state.
    int64_t last_used_ns = 0;
    bool busy = false;                              // A current request is queued or runs.
    std::deque<std::pair<uint32_t, uint8_t>> held;  // Request ids and their flags.
    bool ended = false;                             // Its current request carried an end.
  };
  // Makes `request` current: busy, its state zeroed on a start.
  static void Begin(Sequence& s, uint8_t flags);

  std::string model_;
  std::vector<uint64_t> state_bytes_;  // Per state, one row.
  std::vector<int> input_state_, output_state_;
  int64_t max_sequences_;
  int64_t max_idle_ns_;
  std::unordered_map<SequenceKey, Sequence, KeyHash> sequences_;
};

}  // namespace ferry::worker
