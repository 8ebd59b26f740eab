#include "worker/model_queue.h"

namespace ferry {

void ModelQueue::TrackDeadlines(bool on) {
  track_deadlines_ = on;
  deadlines_.clear();
  urgent_valid_ = false;
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
    Nanos d = *request.deadline;
    if (urgent_valid_ && d > urgent_now_ && (!urgent_ || d < *urgent_)) {
      urgent_ = d;
    }
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
    if (urgent_ && *urgent_ == *request.deadline) {
      urgent_valid_ = false;
    }
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
  if (urgent_valid_ && now >= urgent_now_ && (!urgent_ || now < *urgent_)) {
    return urgent_;  // Nothing between the cached now and this one can have passed.
  }
  auto it = deadlines_.upper_bound(now);
  urgent_ = it == deadlines_.end() ? std::nullopt : std::optional<Nanos>(*it);
  urgent_now_ = now;
  urgent_valid_ = true;
  return urgent_;
}

}  // namespace ferry
