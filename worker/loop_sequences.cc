// Sequences: a stateful model's requests checked against their sequence, held behind its
// current request, handed over in turn, and their state kept (sequence_table.h).
#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "worker/dispatch_loop.h"

namespace ferry::worker {

SequenceTable* DispatchLoop::SequencesOf(int model) const {
  return sequences_[static_cast<size_t>(model)].get();
}

Result<bool> DispatchLoop::ArriveInSequence(uint32_t id, int64_t now) {
  Request& r = requests_[id];
  const shm::DescriptorData& d = r.descriptor;
  const std::string& name = models_[static_cast<size_t>(r.model)].name;
  SequenceTable* table = SequencesOf(r.model);
  if (table == nullptr) {
    if (d.sequence_id != 0) {
      return InvalidArgument("model '" + name +
                             "' keeps no state: a request to it may not carry a sequence");
    }
    return true;
  }
  if (d.sequence_id == 0) {
    return InvalidArgument("model '" + name +
                           "' is stateful: every request needs a sequence_id (and "
                           "sequence_start on a sequence's first)");
  }
  if (d.rows != 1) {
    return InvalidArgument("model '" + name +
                           "' is stateful: a request is one row of its "
                           "sequence, got " +
                           std::to_string(d.rows));
  }
  FERRY_ASSIGN_OR_RETURN(SequenceTable::Arrival arrival,
                         table->Arrive({d.tenant, d.sequence_id}, d.sequence_flags, id, now));
  r.role = arrival == SequenceTable::Arrival::kRun ? Request::Role::kCurrent : Request::Role::kHeld;
  return arrival == SequenceTable::Arrival::kRun;
}

void DispatchLoop::PromoteSequences(int64_t now) {
  // Failing a request can hand its sequence's next one over: loop until nothing is left.
  while (!promote_.empty() || !orphans_.empty()) {
    std::vector<uint32_t> orphans = std::move(orphans_);
    orphans_.clear();
    for (uint32_t id : orphans) {
      const Request& r = requests_[id];
      requests_[id].role = Request::Role::kNone;  // Out of the table already.
      FailRequest(
          id, InvalidArgument("model '" + models_[static_cast<size_t>(r.model)].name +
                              "': sequence " + std::to_string(r.descriptor.sequence_id) +
                              " ended before this request (sequence_end on an earlier one): start "
                              "it anew with sequence_start"));
    }
    std::vector<uint32_t> promote = std::move(promote_);
    promote_.clear();
    for (uint32_t id : promote) {
      requests_[id].role = Request::Role::kCurrent;  // The table made it current.
      if (Status queued = Enqueue(id, now); !queued.ok()) {
        FailRequest(id, queued.error());
      }
    }
  }
}

void DispatchLoop::FailSequenced(const Error& error) {
  for (;;) {
    std::vector<uint32_t> ids = std::move(promote_);
    promote_.clear();
    ids.insert(ids.end(), orphans_.begin(), orphans_.end());
    orphans_.clear();
    for (const std::unique_ptr<SequenceTable>& table : sequences_) {
      if (table != nullptr) {
        std::vector<uint32_t> held = table->TakeHeld();
        ids.insert(ids.end(), held.begin(), held.end());
      }
    }
    if (ids.empty()) {
      return;
    }
    for (uint32_t id : ids) {
      requests_[id].role = Request::Role::kNone;  // Out of the table's hands already.
      FailRequest(id, error);
    }
  }
}

void DispatchLoop::KeepStates(const Batch& batch, size_t k) {
  const Request& r = requests_[batch.members[k]];
  SequenceTable* table = SequencesOf(r.model);
  if (table == nullptr || r.role != Request::Role::kCurrent) {
    return;
  }
  const RequestIo& io = batch.job.requests[k];
  SequenceKey key{r.descriptor.tenant, r.descriptor.sequence_id};
  for (size_t o = 0; o < io.outputs.size(); ++o) {
    int state = table->OutputState(o);
    if (state >= 0) {
      std::span<uint8_t> row = table->State(key, static_cast<size_t>(state));
      std::memcpy(row.data(), io.outputs[o].data(), std::min(row.size(), io.outputs[o].size()));
    }
  }
}

}  // namespace ferry::worker
