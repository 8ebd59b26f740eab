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
// A request changes its sequence only by succeeding: a start reads zeros and its outputs
// become the state (Keep), an end drops the sequence once it succeeded. A request refused,
// shed, cancelled or failed leaves the state as it was; a start that did not run also cuts
// off the requests waiting behind it without a start of their own (they meant to follow it),
// and a sequence that no request of ran is dropped.
//
// Sequences are keyed by (tenant, id): a tenant cannot reach another's state.
//
// Thread safety: none; the dispatch loop's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
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

// At most this many requests of one sequence wait behind its current one, and this many of
// all of a model's sequences together (held requests are outside the scheduler's queue bound).
inline constexpr size_t kMaxHeldPerSequence = 64;
inline constexpr size_t kMaxHeldPerModel = 4096;

class SequenceTable {
 public:
  // REQUIRES: manifest.stateful(); `model` names it in messages.
  SequenceTable(const Manifest& manifest, std::string model);

  // What became of an arriving request.
  enum class Arrival { kRun, kHeld };
  // Request `request` of sequence `key` arrived with `flags` (shm::kSequenceStart/End). kRun:
  // it is the sequence's current request: hand it to the scheduler. kHeld: it waits behind
  // the current one (Leave hands it over). Refused: INVALID_ARGUMENT for a sequence that is
  // not live without a start; RESOURCE_EXHAUSTED past max_sequences (after dropping idle
  // ones), kMaxHeldPerSequence or kMaxHeldPerModel.
  Result<Arrival> Arrive(SequenceKey key, uint8_t flags, uint32_t request, int64_t now_ns);

  // What follows the current request leaving: the next request to hand to the scheduler (the
  // sequence's current one from now), and requests to fail, out of the table already: they
  // followed an end (or a start that did not run: `start_failed`) without starting anew.
  struct Next {
    std::optional<uint32_t> run;
    std::vector<uint32_t> orphans;
    bool start_failed = false;
  };
  // The current request of `key`, `request`, left; `succeeded`: it ran and its states were
  // kept. An end that succeeded drops the sequence once nothing of it waits, and so does a
  // start that did not run on a sequence nothing ran of. No-op when `request` is not the
  // current one of a live sequence.
  Next Leave(SequenceKey key, uint32_t request, bool succeeded, int64_t now_ns);
  // A held request left before its turn (cancelled; the worker stopping). No-op if not held.
  void Unhold(SequenceKey key, uint32_t request);

  // What request `request` (the current one of `key`) reads as state `k`: zeros when it starts
  // the sequence, else the sequence's row. Valid while it is current. Empty when it is not
  // current (the backend then refuses the batch for its sizes).
  std::span<const uint8_t> Input(SequenceKey key, uint32_t request, size_t k) const;
  // After request `request` (current) ran: `row` becomes state `k`. No-op otherwise.
  void Keep(SequenceKey key, uint32_t request, size_t k, std::span<const uint8_t> row);
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
  // Seeded per table: clients choose ids, and must not be able to choose them to collide.
  struct KeyHash {
    uint64_t seed = 0;
    size_t operator()(const SequenceKey& k) const;
  };
  struct Sequence {
    std::vector<std::vector<uint8_t>> state;  // One row per state.
    int64_t last_used_ns = 0;
    bool busy = false;                              // A current request is queued or runs.
    uint32_t current = 0;                           // That request, while busy,
    uint8_t flags = 0;                              //   and its flags.
    bool ran = false;                               // A request of it succeeded.
    std::deque<std::pair<uint32_t, uint8_t>> held;  // Request ids and their flags.
  };
  static void Begin(Sequence& s, uint32_t request, uint8_t flags);
  const Sequence* Current(SequenceKey key, uint32_t request) const;

  std::string model_;
  std::vector<uint64_t> state_bytes_;        // Per state, one row.
  std::vector<std::vector<uint8_t>> zeros_;  // Per state: what a start reads.
  std::vector<int> input_state_, output_state_;
  int64_t max_sequences_;
  int64_t max_idle_ns_;
  size_t held_ = 0;  // Requests held, over every sequence.
  std::unordered_map<SequenceKey, Sequence, KeyHash> sequences_;
};

}  // namespace ferry::worker
