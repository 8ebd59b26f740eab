#include "hookhost/frontend/grpc_stream_sink.h"

namespace ferry::frontend {

Status StreamSink::WritePartial(grpc::ByteBuffer message) {
  std::unique_lock lock(mutex_);
  auto over = [&] { return finished_ || finish_pending_ || cancelled_ || broken_; };
  bool room = room_.wait_for(lock, std::chrono::nanoseconds(kMaxWaitNs), [&] {
    return over() || !request_open_ || queue_.size() < kMaxQueued;
  });
  if (over() || !request_open_) {
    return Cancelled("the stream was cancelled or closed, or the request has ended");
  }
  if (!room) {
    return Unavailable("the client read no response for " +
                       std::to_string(kMaxWaitNs / 1'000'000'000) + " s");
  }
  queue_.push_back(std::move(message));
  Advance();
  return OkStatus();
}

void StreamSink::WriteAnswer(grpc::ByteBuffer message) {
  std::lock_guard lock(mutex_);
  request_open_ = false;
  room_.notify_all();
  if (finished_ || finish_pending_ || cancelled_ || broken_) {
    return;
  }
  queue_.push_back(std::move(message));
  Advance();
}

void StreamSink::CloseRequest() {
  std::lock_guard lock(mutex_);
  request_open_ = false;
  room_.notify_all();
}

void StreamSink::BeginRequest() {
  std::lock_guard lock(mutex_);
  in_request_ = true;
  request_open_ = true;
}

void StreamSink::EndRequest(grpc::ByteBuffer* into) {
  std::lock_guard lock(mutex_);
  in_request_ = false;
  request_open_ = false;
  read_into_ = into;
  Advance();
}

void StreamSink::WriteDone(bool ok) {
  std::lock_guard lock(mutex_);
  writing_ = false;
  if (!queue_.empty()) {
    queue_.pop_front();
  }
  room_.notify_all();
  if (!ok) {  // The client is gone: nothing more is written.
    broken_ = true;
    queue_.clear();
  }
  Advance();
}

void StreamSink::Finish(const grpc::Status& status) {
  std::lock_guard lock(mutex_);
  if (!finished_ && !finish_pending_) {
    finished_status_ = status;
    finish_pending_ = true;
  }
  Advance();
  room_.notify_all();
}

void StreamSink::Cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  room_.notify_all();
}

void StreamSink::Advance() {
  if (finished_ || writing_) {
    return;
  }
  if (broken_ && !finish_pending_) {
    finish_pending_ = true;
    finished_status_ = grpc::Status::OK;
  }
  if (finish_pending_) {
    queue_.clear();
    read_into_ = nullptr;
    if (!in_request_) {  // Else at EndRequest.
      finished_ = true;
      room_.notify_all();
      reactor_->Finish(finished_status_);
    }
    return;
  }
  if (!queue_.empty()) {
    writing_ = true;
    reactor_->StartWrite(&queue_.front());
    return;
  }
  if (read_into_ != nullptr) {
    grpc::ByteBuffer* into = read_into_;
    read_into_ = nullptr;
    reactor_->StartRead(into);
  }
}

}  // namespace ferry::frontend
