#include "hookhost/frontend/grpc_calls.h"

#include "common/thread_name.h"

namespace ferry::frontend {

// --- CallQueue ---
namespace {

std::unique_ptr<grpc::CompletionQueue> NonPollingQueue() {
  grpc_completion_queue_attributes attributes{GRPC_CQ_CURRENT_VERSION, GRPC_CQ_NEXT,
                                              GRPC_CQ_NON_POLLING, nullptr};
  return std::make_unique<grpc::CompletionQueue>(grpc_completion_queue_create(
      grpc_completion_queue_factory_lookup(&attributes), &attributes, nullptr));
}

thread_local bool draining_answers = false;

}  // namespace

CallQueue::CallQueue(std::unique_ptr<grpc::ServerCompletionQueue> cq)
    : cq_(std::move(cq)), answers_(NonPollingQueue()) {}

CallQueue::~CallQueue() {
  if (thread_.joinable()) {
    thread_.detach();  // ShutdownWhenEmpty gave up: the process is ending.
  }
}

void CallQueue::DrainAnswers() {
  if (draining_answers) {
    return;
  }
  draining_answers = true;
  void* tag = nullptr;
  bool ok = false;
  while (answers_->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) ==
         grpc::CompletionQueue::GOT_EVENT) {
    static_cast<CompletionEvent*>(tag)->Complete(ok);
  }
  draining_answers = false;
}

void CallQueue::Start() {
  thread_ = std::thread([this] { Run(); });
}

void CallQueue::Run() {
  NameThisThread("ferry-grpc-cq");
  const gpr_timespec period = gpr_time_from_millis(kAnswerDrainMs, GPR_TIMESPAN);
  gpr_timespec next_drain = gpr_now(GPR_CLOCK_MONOTONIC);
  void* tag = nullptr;
  bool ok = false;
  while (true) {
    gpr_timespec deadline = in_progress_.load(std::memory_order_relaxed) > 0
                                ? next_drain
                                : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    grpc::CompletionQueue::NextStatus got = cq_->AsyncNext(&tag, &ok, deadline);
    if (got == grpc::CompletionQueue::SHUTDOWN) {
      return;
    }
    if (got == grpc::CompletionQueue::GOT_EVENT) {
      static_cast<CompletionEvent*>(tag)->Complete(ok);
    }
    gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(now, next_drain) >= 0) {
      DrainAnswers();
      next_drain = gpr_time_add(now, period);
    }
  }
}

void CallQueue::Add() {
  std::lock_guard lock(mu_);
  ++calls_;
}

void CallQueue::Remove() {
  std::lock_guard lock(mu_);
  if (--calls_ == 0) {
    none_left_.notify_all();
  }
}

size_t CallQueue::calls() {
  std::lock_guard lock(mu_);
  return calls_;
}

bool CallQueue::ShutdownWhenEmpty(int64_t wait_ms) {
  {
    std::unique_lock lock(mu_);
    if (!none_left_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                             [this] { return calls_ == 0; })) {
      return false;
    }
  }
  cq_->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  if (thread_.joinable()) {
    thread_.join();
  } else {
    while (cq_->Next(&tag, &ok)) {  // Never started: drained here.
    }
  }
  answers_->Shutdown();  // No call is left, so no event of one is either.
  while (answers_->Next(&tag, &ok)) {
  }
  return true;
}

// --- CallLane ---
CallLane::CallLane() {
  thread_ = std::thread([this] {
    NameThisThread("ferry-grpc-lane");
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
void UnaryCall::Await(const Method* method, CallQueue* queue) {
  new UnaryCall(method, queue);  // Owned by its events from here.
}

UnaryCall::UnaryCall(const Method* method, CallQueue* queue)
    : method_(method), queue_(queue), responder_(&context_) {
  queue_->Add();
  context_.AsyncNotifyWhenDone(Tag(&ended_));  // Delivered only for a call that came.
  method_->request(&context_, &in_bytes_, &responder_, queue_->answers(), queue_->cq(),
                   Tag(&arrived_));
}

UnaryCall::~UnaryCall() {
  if (came_) {
    queue_->CallFreed();
  }
  queue_->Remove();
}

void UnaryCall::Arrived(bool ok) {
  if (!ok) {
    delete this;  // The server is shutting down: no call came, and no end will be delivered.
    return;
  }
  came_ = true;
  queue_->CallCame();
  Await(method_, queue_);
  method_->handler(*this);
}

void UnaryCall::Finish(const grpc::Status& status) {
  CallQueue* queue = queue_;  // The drain below may free the call.
  if (status.ok()) {
    responder_.Finish(out_bytes_, status, Tag(&answered_));
  } else {
    responder_.FinishWithError(status, Tag(&answered_));
  }
  queue->DrainAnswers();
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

UnaryCall::Handler OnLane(CallLane* lane, UnaryCall::Handler handle) {
  return [lane, handle = std::move(handle)](UnaryCall& call) {
    auto run = [handle, call = &call] {
      if (call->cancel()->fired()) {  // Nobody waits for its answer any more.
        call->Finish({grpc::StatusCode::CANCELLED, "cancelled while waiting for the call lane"});
        return;
      }
      handle(*call);
    };
    if (!lane->Post(run)) {
      call.Finish({grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "too many shared-memory and settings calls are waiting; try again"});
    }
  };
}

// --- StreamCall ---
StreamCall::~StreamCall() {
  if (queue_ != nullptr) {
    queue_->Remove();
  }
}

void StreamCall::Await(StreamCall* stream, const Requester* request,
                       std::function<StreamCall*()> next, CallQueue* queue) {
  queue->Add();
  stream->request_ = request;
  stream->next_ = std::move(next);
  stream->queue_ = queue;
  stream->context_.AsyncNotifyWhenDone(Tag(&stream->ended_));
  (*request)(&stream->context_, &stream->stream_, queue->cq(), Tag(&stream->arrived_));
}

void StreamCall::StartRead(grpc::ByteBuffer* into) {
  refs_.fetch_add(1, std::memory_order_relaxed);
  stream_.Read(into, Tag(&read_));
}

void StreamCall::StartWrite(const grpc::ByteBuffer* message) {
  refs_.fetch_add(1, std::memory_order_relaxed);
  stream_.Write(*message, Tag(&write_));
}

void StreamCall::Finish(const grpc::Status& status) { stream_.Finish(status, Tag(&finished_)); }

void StreamCall::Arrived(bool ok) {
  if (!ok) {
    delete this;  // Shutting down: no stream came, and no end will be delivered.
    return;
  }
  Await(next_(), request_, next_, queue_);
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
