// One model's queue of requests, ordered by priority level (scheduler_types.h) and, within a
// level, by arrival; with what the disciplines need cheaply: the front (the most urgent
// level's oldest request), the most urgent deadline, and the queued row count.
//
// Thread safety: requires external synchronization.
#pragma once

#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "worker/scheduler/scheduler_types.h"

namespace ferry {

class ModelQueue {
 public:
  // Deadlines are indexed only when `track_deadlines` (edf needs the most urgent one; the
  // index costs a tree insert and erase per request, which fair and fifo need not pay).
  explicit ModelQueue(bool track_deadlines = true) : track_deadlines_(track_deadlines) {}

  // Starts (rebuilding the index from the queued requests) or stops indexing deadlines.
  void TrackDeadlines(bool on);

  // Behind every queued request of the same or a more urgent level: O(1) when it is of the
  // least urgent level queued (the common case: one level), else O(log n) plus the move.
  // REQUIRES: request.priority in kHighestPriority..kLowestPriority (Scheduler checks it).
  void Push(QueuedRequest request);
  QueuedRequest PopFront();
  // Removes the request at `index` (0 = front). REQUIRES: index < size().
  QueuedRequest RemoveAt(size_t index);
  // The index of the request whose payload is `payload`, or nullopt (a linear scan).
  std::optional<size_t> Find(uint64_t payload) const;
  // The index of tenant `tenant`'s first request (its most urgent level's oldest), or
  // nullopt (a linear scan).
  std::optional<size_t> FindTenant(uint32_t tenant) const;
  // The index of tenant `tenant`'s oldest request of a level less urgent than `level`, or
  // nullopt (a linear scan).
  std::optional<size_t> FindOldestBelow(uint32_t tenant, Priority level) const;
  // Moves the request at `index` to the front, where a dispatch for its tenant starts. The
  // front may then be of a less urgent level than requests behind it.
  // REQUIRES: index < size(); the caller takes the front out before the next Push.
  void MoveToFront(size_t index);
  // Moves every request whose deadline is at or before `now` to `out` (in queue order), in
  // one pass that leaves the others in order. Returns the earliest deadline left (or max).
  Nanos RemoveExpired(Nanos now, std::vector<QueuedRequest>* out);

  bool empty() const { return requests_.empty(); }
  size_t size() const { return requests_.size(); }
  const QueuedRequest& at(size_t index) const { return requests_[index]; }
  const QueuedRequest& front() const { return requests_.front(); }
  // The earliest arrival queued, whatever its level (fifo's and fair's tie-break use it, so
  // levels never change which model runs next). REQUIRES: !empty().
  Nanos oldest_arrival() const;
  int64_t queued_rows() const { return rows_; }
  // Rows queued with shape variant `variant` (0 for kNoCompiledProgram or an unseen one).
  int64_t variant_rows(int variant) const {
    return variant >= 0 && static_cast<size_t>(variant) < variant_rows_.size()
               ? variant_rows_[static_cast<size_t>(variant)]
               : 0;
  }
  // The soonest deadline after `now` of any queued request; nullopt when none has one.
  // Deadlines already passed do not count: those requests are shed when they reach the
  // front, and must not hold their model at the top of edf meanwhile.
  // REQUIRES: constructed with track_deadlines.
  std::optional<Nanos> MostUrgentDeadline(Nanos now) const;

 private:
  void Forget(const QueuedRequest& request);

  bool track_deadlines_;
  std::deque<QueuedRequest> requests_;
  // Deadlines of the queued requests still in the future, as a min-heap with lazy deletion
  // (contiguous, O(log n) push and pop; a tree node per request cost a cache miss per level,
  // ~1 us per request at 1,500 queued in ferry-decision-bench's edf overload). `removed_`
  // holds deadlines of requests that left while still in the heap; equal tops cancel.
  // Every deadline <= passed_ has been popped for good: now only grows, so a passed deadline
  // never counts again, and a request leaving with one has nothing to cancel.
  void CleanHeap(Nanos now) const;
  mutable std::vector<Nanos> heap_;
  mutable std::vector<Nanos> removed_;
  mutable Nanos passed_ = std::numeric_limits<Nanos>::min();
  int64_t rows_ = 0;
  std::vector<int64_t> variant_rows_;             // By variant index.
  size_t level_count_[kLowestPriority + 1] = {};  // Requests queued per priority level.
};

}  // namespace ferry
