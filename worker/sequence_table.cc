// A stateful model's live sequences on one worker.
#include "worker/sequence_table.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "common/mix.h"
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

size_t SequenceTable::KeyHash::operator()(const SequenceKey& k) const {
  return static_cast<size_t>(Mix64(k.id ^ seed) ^ Mix64(seed + k.tenant));
}

SequenceTable::SequenceTable(const Manifest& manifest, std::string model)
    : model_(std::move(model)),
      max_sequences_(manifest.sequence.max_sequences),
      max_idle_ns_(manifest.sequence.max_idle_us * 1000),
      sequences_(16,
                 KeyHash{std::random_device{}() * 0x9e3779b97f4a7c15ULL ^ std::random_device{}()}) {
  const std::vector<SequenceState>& states = manifest.sequence.states;
  state_bytes_.resize(states.size(), 0);
  for (const TensorSpec& t : manifest.inputs) {
    int k = IndexOf(states, t.name, true);
    input_state_.push_back(k);
    if (k >= 0) {  // ParseManifest checked that one row of a state has a size, and fits.
      state_bytes_[static_cast<size_t>(k)] = TensorByteSize(t.dtype, t.At(1)).value_or(0);
    }
  }
  for (const TensorSpec& t : manifest.outputs) {
    output_state_.push_back(IndexOf(states, t.name, false));
  }
  for (uint64_t bytes : state_bytes_) {
    zeros_.emplace_back(bytes, uint8_t{0});
  }
}

void SequenceTable::Begin(Sequence& s, uint32_t request, uint8_t flags) {
  s.busy = true;
  s.current = request;
  s.flags = flags;
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
    fresh.state = zeros_;
    it = sequences_.emplace(key, std::move(fresh)).first;
  }
  Sequence& s = it->second;
  s.last_used_ns = now_ns;
  if (!s.busy) {
    Begin(s, request, flags);
    return Arrival::kRun;
  }
  if (s.held.size() >= kMaxHeldPerSequence || held_ >= kMaxHeldPerModel) {
    return ResourceExhausted("model '" + model_ + "': " + Describe(key) + " has " +
                             std::to_string(s.held.size()) + " requests waiting (at most " +
                             std::to_string(kMaxHeldPerSequence) + ", and " +
                             std::to_string(kMaxHeldPerModel) +
                             " over the model's sequences): send its next one after an answer");
  }
  s.held.emplace_back(request, flags);
  ++held_;
  return Arrival::kHeld;
}

SequenceTable::Next SequenceTable::Leave(SequenceKey key, uint32_t request, bool succeeded,
                                         int64_t now_ns) {
  Next next;
  auto it = sequences_.find(key);
  if (it == sequences_.end() || !it->second.busy || it->second.current != request) {
    return next;
  }
  Sequence& s = it->second;
  s.busy = false;
  s.last_used_ns = now_ns;
  s.ran = s.ran || succeeded;
  bool ended = succeeded && (s.flags & shm::kSequenceEnd) != 0;
  next.start_failed = !succeeded && (s.flags & shm::kSequenceStart) != 0;
  while (!s.held.empty()) {
    auto [held, held_flags] = s.held.front();
    s.held.pop_front();
    --held_;
    if ((ended || next.start_failed) && (held_flags & shm::kSequenceStart) == 0) {
      next.orphans.push_back(held);
      continue;
    }
    Begin(s, held, held_flags);
    next.run = held;
    return next;
  }
  if (ended || !s.ran) {
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
  size_t before = held.size();
  held.erase(std::remove_if(held.begin(), held.end(),
                            [&](const auto& entry) { return entry.first == request; }),
             held.end());
  held_ -= before - held.size();
}

const SequenceTable::Sequence* SequenceTable::Current(SequenceKey key, uint32_t request) const {
  auto it = sequences_.find(key);
  if (it == sequences_.end() || !it->second.busy || it->second.current != request) {
    return nullptr;
  }
  return &it->second;
}

std::span<const uint8_t> SequenceTable::Input(SequenceKey key, uint32_t request, size_t k) const {
  const Sequence* s = Current(key, request);
  if (s == nullptr || k >= zeros_.size()) {
    return {};
  }
  return (s->flags & shm::kSequenceStart) != 0 ? zeros_[k] : s->state[k];
}

void SequenceTable::Keep(SequenceKey key, uint32_t request, size_t k,
                         std::span<const uint8_t> row) {
  auto it = sequences_.find(key);
  if (it == sequences_.end() || !it->second.busy || it->second.current != request ||
      k >= it->second.state.size()) {
    return;
  }
  std::vector<uint8_t>& state = it->second.state[k];
  std::memcpy(state.data(), row.data(), std::min(row.size(), state.size()));
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
  held_ = 0;
  return held;
}

}  // namespace ferry::worker
