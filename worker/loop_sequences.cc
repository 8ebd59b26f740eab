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

void DispatchLoop::LeaveSequence(uint32_t id) {
  Request& r = requests_[id];
  SequenceTable* table = SequencesOf(r.model);
  SequenceKey key{r.descriptor.tenant, r.descriptor.sequence_id};
  if (r.role == Request::Role::kHeld) {
    table->Unhold(key, id);
  } else {
    if (r.role == Request::Role::kPromoting) {
      std::erase(promote_, id);  // Cancelled before its turn reached the scheduler.
    }
    SequenceTable::Next next = table->Leave(key, id, r.succeeded, MonotonicNs());
    if (next.run) {
      requests_[*next.run].role = Request::Role::kPromoting;
      promote_.push_back(*next.run);
    }
    for (uint32_t orphan : next.orphans) {
      requests_[orphan].role = Request::Role::kNone;  // Out of the table.
      orphans_.emplace_back(orphan, next.start_failed);
    }
  }
  r.role = Request::Role::kNone;
}

void DispatchLoop::PromoteSequences(int64_t now) {
  // Failing a request can hand its sequence's next one over: loop until nothing is left.
  while (!promote_.empty() || !orphans_.empty()) {
    std::vector<std::pair<uint32_t, bool>> orphans = std::move(orphans_);
    orphans_.clear();
    for (auto [id, start_failed] : orphans) {
      const Request& r = requests_[id];
      std::string what = "model '" + models_[static_cast<size_t>(r.model)].name + "': sequence " +
                         std::to_string(r.descriptor.sequence_id);
      FailRequest(id,
                  InvalidArgument(what +
                                  (start_failed ? ": the start this request followed did not run "
                                                  "(refused, shed, cancelled or failed)"
                                                : " ended before this request (sequence_end on an "
                                                  "earlier one)") +
                                  ": start it anew with sequence_start"));
    }
    std::vector<uint32_t> promote = std::move(promote_);
    promote_.clear();
    for (uint32_t id : promote) {
      requests_[id].role = Request::Role::kCurrent;  // The table made it current (kPromoting).
      if (Status queued = Enqueue(id, now); !queued.ok()) {
        FailRequest(id, queued.error());
      }
    }
  }
}

void DispatchLoop::FailSequenced(const Error& error) {
  for (;;) {
    // Promoted ones leave as current (their successors come next round); the rest are out
    // of the table already.
    std::vector<uint32_t> ids = std::move(promote_);
    promote_.clear();
    std::vector<uint32_t> out;
    for (auto [id, start_failed] : orphans_) {
      out.push_back(id);
    }
    orphans_.clear();
    for (const std::unique_ptr<SequenceTable>& table : sequences_) {
      if (table != nullptr) {
        std::vector<uint32_t> held = table->TakeHeld();
        out.insert(out.end(), held.begin(), held.end());
      }
    }
    for (uint32_t id : out) {
      requests_[id].role = Request::Role::kNone;
    }
    if (ids.empty() && out.empty()) {
      return;
    }
    ids.insert(ids.end(), out.begin(), out.end());
    for (uint32_t id : ids) {
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
      table->Keep(key, batch.members[k], static_cast<size_t>(state), io.outputs[o]);
    }
  }
}

}  // namespace ferry::worker
