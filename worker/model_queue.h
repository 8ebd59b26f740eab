// One model's FIFO queue of requests, with what the disciplines need in O(1) or O(log n):
// the oldest arrival (the front), the most urgent deadline, and the queued row count.
//
// Thread safety: requires external synchronization.
#pragma once

#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "worker/scheduler_types.h"

namespace ferry {

class ModelQueue {
 public:
  // Deadlines are indexed only when `track_deadlines` (edf needs the most urgent one; the
  // index costs a tree insert and erase per request, which fair and fifo need not pay).
  explicit ModelQueue(bool track_deadlines = true) : track_deadlines_(track_deadlines) {}

  // Starts (rebuilding the index from the queued requests) or stops indexing deadlines.
  void TrackDeadlines(bool on);

  void Push(QueuedRequest request);
  QueuedRequest PopFront();
  // Removes the request at `index` (0 = front). REQUIRES: index < size().
  QueuedRequest RemoveAt(size_t index);

  bool empty() const { return requests_.empty(); }
  size_t size() const { return requests_.size(); }
  const QueuedRequest& at(size_t index) const { return requests_[index]; }
  const QueuedRequest& front() const { return requests_.front(); }
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
  std::multiset<Nanos> deadlines_;
  // MostUrgentDeadline's last answer, for `urgent_now_`: still the answer for any later now
  // below it while no request holding it leaves (a push can only lower it). Makes edf's scan
  // over models O(1) per model that did not change.
  mutable bool urgent_valid_ = false;
  mutable Nanos urgent_now_ = 0;
  mutable std::optional<Nanos> urgent_;
  int64_t rows_ = 0;
  std::vector<int64_t> variant_rows_;  // By variant index.
};

}  // namespace ferry
