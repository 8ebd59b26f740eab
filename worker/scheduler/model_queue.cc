#include "worker/scheduler/model_queue.h"

#include <algorithm>

namespace ferry {

void ModelQueue::TrackDeadlines(bool on) {
  track_deadlines_ = on;
  heap_.clear();
  removed_.clear();
  if (on) {
    for (const QueuedRequest& r : requests_) {
      if (r.deadline && *r.deadline > passed_) {
        heap_.push_back(*r.deadline);
      }
    }
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
}

void ModelQueue::Push(QueuedRequest request) {
  if (track_deadlines_ && request.deadline && *request.deadline > passed_) {
    heap_.push_back(*request.deadline);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  rows_ += request.rows;
  ++level_count_[request.priority];
  if (request.variant >= 0) {
    if (static_cast<size_t>(request.variant) >= variant_rows_.size()) {
      variant_rows_.resize(static_cast<size_t>(request.variant) + 1, 0);
    }
    variant_rows_[static_cast<size_t>(request.variant)] += request.rows;
  }
  if (requests_.empty() || requests_.back().priority <= request.priority) {
    requests_.push_back(std::move(request));
    return;
  }
  auto at = std::upper_bound(
      requests_.begin(), requests_.end(), request.priority,
      [](int priority, const QueuedRequest& queued) { return priority < queued.priority; });
  requests_.insert(at, std::move(request));
}

Nanos ModelQueue::oldest_arrival() const {
  // Each level is in arrival order and the levels follow one another: the oldest request is
  // the first of some level.
  Nanos oldest = std::numeric_limits<Nanos>::max();
  size_t first = 0;
  for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
    if (level_count_[level] > 0) {
      oldest = std::min(oldest, requests_[first].arrival);
      first += level_count_[level];
    }
  }
  return oldest;
}

std::optional<size_t> ModelQueue::Find(uint64_t payload) const {
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i].payload == payload) {
      return i;
    }
  }
  return std::nullopt;
}

std::optional<size_t> ModelQueue::FindTenant(uint32_t tenant) const {
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i].tenant == tenant) {
      return i;
    }
  }
  return std::nullopt;
}

std::optional<size_t> ModelQueue::FindOldestBelow(uint32_t tenant, Priority level) const {
  std::optional<size_t> oldest;
  for (size_t i = 0; i < requests_.size(); ++i) {
    const QueuedRequest& r = requests_[i];
    if (r.tenant == tenant && r.priority > level &&
        (!oldest || r.arrival < requests_[*oldest].arrival)) {
      oldest = i;
    }
  }
  return oldest;
}

void ModelQueue::MoveToFront(size_t index) {
  if (index == 0) {
    return;
  }
  QueuedRequest request = requests_[index];
  requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(index));
  requests_.push_front(request);
}

void ModelQueue::Forget(const QueuedRequest& request) {
  if (track_deadlines_ && request.deadline && *request.deadline > passed_) {
    if (heap_.front() == *request.deadline) {
      // The common case (deadlines leaving in order): an equal entry is on top; drop it now
      // instead of recording a cancellation (equal entries are interchangeable).
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      heap_.pop_back();
    } else {
      removed_.push_back(*request.deadline);
      std::push_heap(removed_.begin(), removed_.end(), std::greater<>());
    }
  }
  rows_ -= request.rows;
  --level_count_[request.priority];
  if (request.variant >= 0) {
    variant_rows_[static_cast<size_t>(request.variant)] -= request.rows;
  }
}

QueuedRequest ModelQueue::PopFront() {
  QueuedRequest request = std::move(requests_.front());
  requests_.pop_front();
  Forget(request);
  return request;
}

QueuedRequest ModelQueue::RemoveAt(size_t index) {
  if (index == 0) {
    return PopFront();
  }
  QueuedRequest request = std::move(requests_[index]);
  requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(index));
  Forget(request);
  return request;
}

Nanos ModelQueue::RemoveExpired(Nanos now, std::vector<QueuedRequest>* out) {
  Nanos earliest = std::numeric_limits<Nanos>::max();
  size_t kept = 0;
  for (size_t i = 0; i < requests_.size(); ++i) {
    QueuedRequest& r = requests_[i];
    if (r.deadline && *r.deadline <= now) {
      Forget(r);
      out->push_back(std::move(r));
      continue;
    }
    if (r.deadline) {
      earliest = std::min(earliest, *r.deadline);
    }
    if (kept != i) {
      requests_[kept] = std::move(r);
    }
    ++kept;
  }
  requests_.resize(kept);
  return earliest;
}

void ModelQueue::CleanHeap(Nanos now) const {
  auto pop = [](std::vector<Nanos>& h) {
    std::pop_heap(h.begin(), h.end(), std::greater<>());
    h.pop_back();
  };
  while (!heap_.empty()) {
    if (!removed_.empty() && removed_.front() == heap_.front()) {
      pop(removed_);  // That request left: cancel its entry.
      pop(heap_);
    } else if (heap_.front() <= now) {
      pop(heap_);  // Passed: it never counts again.
    } else {
      break;
    }
  }
  // Every deadline <= now is gone from the heap now; those of removed_ too (each was in it).
  passed_ = std::max(passed_, now);
  while (!removed_.empty() && removed_.front() <= passed_) {
    pop(removed_);
  }
}

std::optional<Nanos> ModelQueue::MostUrgentDeadline(Nanos now) const {
  CleanHeap(now);
  if (heap_.empty()) {
    return std::nullopt;
  }
  return heap_.front();
}

}  // namespace ferry
