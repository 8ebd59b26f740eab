// A stateful model's live sequences on one worker.
#include "worker/sequence_table.h"

#include <algorithm>

#include "shm/layout.h"

namespace ferry::worker {
namespace {

int IndexOf(const std::vector<SequenceState>& states, const std::string& name, bool input) {
  for (size_t k = 0; k < states.size(); ++k) {
    if ((input ? states[k].input : states[k].output) == name) {
      return static_cast<int>(k);
    }
  }
  return -1;
}

std::string Describe(SequenceKey key) {
  return "sequence " + std::to_string(key.id) +
         (key.tenant != 0 ? " of tenant " + std::to_string(key.tenant) : "");
}

}  // namespace

SequenceTable::SequenceTable(const Manifest& manifest, std::string model)
    : model_(std::move(model)),
      max_sequences_(manifest.sequence.max_sequences),
      max_idle_ns_(manifest.sequence.max_idle_us * 1000) {
  const std::vector<SequenceState>& states = manifest.sequence.states;
  for (const TensorSpec& t : manifest.inputs) {
    int k = IndexOf(states, t.name, true);
    input_state_.push_back(k);
    if (k >= 0) {
      // Checked by ParseManifest: one row of a state fits.
      state_bytes_.resize(std::max(state_bytes_.size(), static_cast<size_t>(k) + 1));
      state_bytes_[static_cast<size_t>(k)] = TensorByteSize(t.dtype, t.At(1)).value_or(0);
    }
  }
  for (const TensorSpec& t : manifest.outputs) {
    output_state_.push_back(IndexOf(states, t.name, false));
  }
}

void SequenceTable::Begin(Sequence& s, uint8_t flags) {
  s.busy = true;
  s.ended = (flags & shm::kSequenceEnd) != 0;
  if ((flags & shm::kSequenceStart) != 0) {
    for (std::vector<uint8_t>& row : s.state) {
      std::fill(row.begin(), row.end(), uint8_t{0});
    }
  }
}

Result<SequenceTable::Arrival> SequenceTable::Arrive(SequenceKey key, uint8_t flags,
                                                     uint32_t request, int64_t now_ns) {
  auto it = sequences_.find(key);
  if (it == sequences_.end()) {
    if ((flags & shm::kSequenceStart) == 0) {
      return InvalidArgument("model '" + model_ + "': " + Describe(key) +
                             " is not live (never started, ended, idle past "
                             "max_sequence_idle_us, or its worker restarted): its first "
                             "request must carry sequence_start");
    }
    if (static_cast<int64_t>(sequences_.size()) >= max_sequences_ && Expire(now_ns) == 0) {
      return ResourceExhausted("model '" + model_ + "': " + std::to_string(sequences_.size()) +
                               " sequences are live on this worker, the most its "
                               "max_sequences allows: end one (sequence_end) or wait for an "
                               "idle one to time out");
    }
    Sequence fresh;
    for (uint64_t bytes : state_bytes_) {
      fresh.state.emplace_back(bytes, uint8_t{0});
    }
    it = sequences_.emplace(key, std::move(fresh)).first;
  }
  Sequence& s = it->second;
  s.last_used_ns = now_ns;
  if (!s.busy) {
    Begin(s, flags);
    return Arrival::kRun;
  }
  if (s.held.size() >= kMaxHeldPerSequence) {
    return ResourceExhausted("model '" + model_ + "': " + Describe(key) + " already has " +
                             std::to_string(kMaxHeldPerSequence) +
                             " requests waiting: send its next one after an answer");
  }
  s.held.emplace_back(request, flags);
  return Arrival::kHeld;
}

SequenceTable::Next SequenceTable::Leave(SequenceKey key, uint8_t flags, int64_t now_ns) {
  Next next;
  auto it = sequences_.find(key);
  if (it == sequences_.end()) {
    return next;
  }
  Sequence& s = it->second;
  s.busy = false;
  s.last_used_ns = now_ns;
  bool ended = s.ended || (flags & shm::kSequenceEnd) != 0;
  while (!s.held.empty()) {
    auto [request, held_flags] = s.held.front();
    s.held.pop_front();
    if (ended && (held_flags & shm::kSequenceStart) == 0) {
      next.orphans.push_back(request);
      continue;
    }
    Begin(s, held_flags);
    next.run = request;
    return next;
  }
  if (ended) {
    sequences_.erase(it);
  }
  return next;
}

void SequenceTable::Unhold(SequenceKey key, uint32_t request) {
  auto it = sequences_.find(key);
  if (it == sequences_.end()) {
    return;
  }
  auto& held = it->second.held;
  held.erase(std::remove_if(held.begin(), held.end(),
                            [&](const auto& entry) { return entry.first == request; }),
             held.end());
}

std::span<uint8_t> SequenceTable::State(SequenceKey key, size_t k) {
  return sequences_.at(key).state.at(k);
}

size_t SequenceTable::Expire(int64_t now_ns) {
  return std::erase_if(sequences_, [&](const auto& entry) {
    const Sequence& s = entry.second;
    return !s.busy && s.held.empty() && now_ns - s.last_used_ns >= max_idle_ns_;
  });
}

std::vector<uint32_t> SequenceTable::TakeHeld() {
  std::vector<uint32_t> held;
  for (auto& [key, s] : sequences_) {
    for (auto [request, flags] : s.held) {
      held.push_back(request);
    }
    s.held.clear();
  }
  return held;
}

}  // namespace ferry::worker
