#include "worker/model_queue.h"

namespace ferry {

void ModelQueue::TrackDeadlines(bool on) {
  track_deadlines_ = on;
  deadlines_.clear();
  if (on) {
    for (const QueuedRequest& r : requests_) {
      if (r.deadline) {
        deadlines_.insert(*r.deadline);
      }
    }
  }
}

void ModelQueue::Push(QueuedRequest request) {
  if (track_deadlines_ && request.deadline) {
    deadlines_.insert(*request.deadline);
  }
  rows_ += request.rows;
  if (request.variant >= 0) {
    if (static_cast<size_t>(request.variant) >= variant_rows_.size()) {
      variant_rows_.resize(static_cast<size_t>(request.variant) + 1, 0);
    }
    variant_rows_[static_cast<size_t>(request.variant)] += request.rows;
  }
  requests_.push_back(std::move(request));
}

void ModelQueue::Forget(const QueuedRequest& request) {
  if (track_deadlines_ && request.deadline) {
    deadlines_.erase(deadlines_.find(*request.deadline));
  }
  rows_ -= request.rows;
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

std::optional<Nanos> ModelQueue::MostUrgentDeadline(Nanos now) const {
  auto it = deadlines_.upper_bound(now);
  if (it == deadlines_.end()) {
    return std::nullopt;
  }
  return *it;
}

}  // namespace ferry
