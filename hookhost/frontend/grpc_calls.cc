#include "hookhost/frontend/grpc_calls.h"

namespace ferry::frontend {

void RunCompletionQueue(grpc::ServerCompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    static_cast<CompletionEvent*>(tag)->Complete(ok);
  }
}

// --- CallLane ---
CallLane::CallLane() {
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) {
        return;  // Stopping, and everything queued has run.
      }
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  });
}

CallLane::~CallLane() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

bool CallLane::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (tasks_.size() >= kMaxQueued) {
      return false;
    }
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

// --- UnaryCall ---
void UnaryCall::Await(const Method* method, grpc::ServerCompletionQueue* cq) {
  new UnaryCall(method, cq);  // Owned by its events from here.
}

UnaryCall::UnaryCall(const Method* method, grpc::ServerCompletionQueue* cq)
    : method_(method), cq_(cq), responder_(&context_) {
  context_.AsyncNotifyWhenDone(&ended_);  // Delivered only for a call that came.
  method_->request(&context_, &in_bytes_, &responder_, cq_, &arrived_);
}

void UnaryCall::Arrived(bool ok) {
  if (!ok) {
    delete this;  // The server is shutting down: no call came, and no end will be delivered.
    return;
  }
  Await(method_, cq_);
  method_->handler(*this);
}

void UnaryCall::Finish(const grpc::Status& status) {
  if (status.ok()) {
    responder_.Finish(out_bytes_, status, &answered_);
  } else {
    responder_.FinishWithError(status, &answered_);
  }
}

void UnaryCall::Answered(bool) { Release(); }

void UnaryCall::Ended(bool) {
  if (context_.IsCancelled()) {
    cancel_->Fire();  // The flow answers the request CANCELLED (maybe inline, through Finish).
  }
  Release();
}

void UnaryCall::Release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete this;
  }
}

// --- StreamCall ---
void StreamCall::Await(StreamCall* stream, const Requester* request,
                       std::function<StreamCall*()> next, grpc::ServerCompletionQueue* cq) {
  stream->request_ = request;
  stream->next_ = std::move(next);
  stream->cq_ = cq;
  stream->context_.AsyncNotifyWhenDone(&stream->ended_);
  (*request)(&stream->context_, &stream->stream_, cq, &stream->arrived_);
}

void StreamCall::StartRead(grpc::ByteBuffer* into) {
  refs_.fetch_add(1, std::memory_order_relaxed);
  stream_.Read(into, &read_);
}

void StreamCall::StartWrite(const grpc::ByteBuffer* message) {
  refs_.fetch_add(1, std::memory_order_relaxed);
  stream_.Write(*message, &write_);
}

void StreamCall::Finish(const grpc::Status& status) { stream_.Finish(status, &finished_); }

void StreamCall::Arrived(bool ok) {
  if (!ok) {
    delete this;  // Shutting down: no stream came, and no end will be delivered.
    return;
  }
  Await(next_(), request_, next_, cq_);
  refs_.fetch_add(1, std::memory_order_relaxed);  // OnStart's, so no reaction ends it early.
  OnStart();
  Release();
}

void StreamCall::ReadDone(bool ok) {
  OnReadDone(ok);
  Release();
}

void StreamCall::WriteDone(bool ok) {
  OnWriteDone(ok);
  Release();
}

void StreamCall::Finished(bool) { Release(); }

void StreamCall::Ended(bool) {
  if (context_.IsCancelled()) {
    OnCancel();
  }
  Release();
}

void StreamCall::Release() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    OnDone();
  }
}

}  // namespace ferry::frontend
