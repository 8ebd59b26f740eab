// The gRPC service's calls on grpc++'s completion-queue API, driven by one thread of the front
// end's own (CallQueue), with no callback method on the server.
//
// Why not the callback API: grpc++ 1.51 serves callback methods on Linux from a completion
// queue of its own, polled by two threads that hand the connections' events to each other
// (one waits in epoll while the other runs what it found). That hand-off, a futex wake and a
// context switch or more per request, made a gRPC request cost the hook host about twice an
// HTTP one; one thread polling one queue runs every event where it finds it
// (docs/benchmarks.md, "The gRPC server on one completion queue").
//
// UnaryCall and StreamCall own one call each, from the moment it is asked for until gRPC is
// done with it, then delete themselves. Their operations (Finish, StartRead, StartWrite) may
// be called from any thread. Arrivals and a stream's events run on the queue's thread; a
// unary call's answer and end run where its queue's answers are drained (CallQueue).
//
// Thread safety: as above. Lifetimes: the service, the methods and the CallQueue outlive every
// call (GrpcFrontEnd stops the server, waits for the calls to end, then drains the queue).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/cancel_signal.h"
#include "hookhost/frontend/proto/inference.pb.h"

namespace ferry::frontend {

// What a completion queue's tag points to: one kind of event of one call.
class CompletionEvent {
 public:
  virtual void Complete(bool ok) = 0;

 protected:
  ~CompletionEvent() = default;
};

// `event` as a tag (CallQueue's thread casts the tag back to a CompletionEvent).
inline void* Tag(CompletionEvent* event) { return event; }

// An event of `Owner`'s: runs `on` with the event's outcome.
template <typename Owner>
class MemberEvent final : public CompletionEvent {
 public:
  MemberEvent(Owner* owner, void (Owner::*on)(bool)) : owner_(owner), on_(on) {}
  void Complete(bool ok) override { (owner_->*on_)(ok); }

 private:
  Owner* owner_;
  void (Owner::*on_)(bool);
};

// The completion queues every call's events go to, the thread that runs them, and the count
// of calls on them: asked for, in progress or finishing. Until a call is deleted an operation
// of its may start from any thread (the hook host's late answer, a stream's last read, the
// next call asked for), and gRPC aborts on one started on a queue already shut down; a
// server's shutdown does not wait for that. So the queues are shut down only once no call is
// left.
//
// Two queues. cq() polls the connections: calls arrive there, and streams' events run there.
// answers() is a non-polling queue for a unary call's own events (its answer sent, its end):
// they are run by whichever thread drains it (DrainAnswers), which is the thread that has just
// answered, without a wake-up. On the polling queue an answer's events made gRPC wake the
// queue's thread through an eventfd only to free the call (0.6 eventfd writes per request at
// 32 in flight, docs/benchmarks.md). The queue's thread drains answers() too, at most every
// kAnswerDrainMs, and wakes to do so while a call has come and is not yet freed: a call
// cancelled by its client is seen within about that even when nothing else is answered.
// (Draining after each of its events cost more than the wake-ups saved: an empty non-polling
// queue is a futex wait that times out at once, and the two threads contended for its lock.)
class CallQueue {
 public:
  static constexpr int64_t kAnswerDrainMs = 2;
  // REQUIRES: every tag on `cq` is a CompletionEvent.
  explicit CallQueue(std::unique_ptr<grpc::ServerCompletionQueue> cq);
  ~CallQueue();  // REQUIRES: ShutdownWhenEmpty returned true, or Start was never called.
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  grpc::ServerCompletionQueue* cq() { return cq_.get(); }
  grpc::CompletionQueue* answers() { return answers_.get(); }
  // Runs the events waiting on answers(), without blocking. Any thread; a nested call (an
  // event that answers another call) returns at once, its caller's loop runs what it adds.
  void DrainAnswers();
  // Starts the thread that runs the queue's events. Once.
  void Start();
  // A call made, and deleted. Any thread.
  void Add();
  void Remove();
  size_t calls();
  // A unary call came, and was freed: while any is between the two, the queue's thread drains
  // answers() at least every kAnswerDrainMs. Any thread.
  void CallCame() { in_progress_.fetch_add(1, std::memory_order_relaxed); }
  void CallFreed() { in_progress_.fetch_sub(1, std::memory_order_relaxed); }
  // Waits up to `wait_ms` for no call to be left, then shuts the queue down and joins its
  // thread: true. False when calls are still left: the queue and its thread run on (the
  // caller leaks what those calls point to rather than free it under them).
  bool ShutdownWhenEmpty(int64_t wait_ms);

 private:
  void Run();  // The queue's thread.

  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::CompletionQueue> answers_;
  std::atomic<int64_t> in_progress_{0};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable none_left_;
  size_t calls_ = 0;  // Guarded by mu_.
};

// A thread for the methods that may wait (a socket round trip to ferryd), so that none holds
// the queue's thread. At most kMaxQueued calls wait; Post refuses more.
class CallLane {
 public:
  static constexpr size_t kMaxQueued = 256;
  CallLane();
  ~CallLane();  // Runs what is queued, then ends.
  CallLane(const CallLane&) = delete;
  CallLane& operator=(const CallLane&) = delete;
  // False when kMaxQueued are waiting (the task is dropped).
  bool Post(std::function<void()> task);

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;  // Guarded by mu_.
  bool stopping_ = false;                    // Guarded by mu_.
  std::thread thread_;
};

using RawResponder = grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>;
using RawStream = grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

// One call of a unary method, its messages as bytes.
class UnaryCall {
 public:
  using Handler = std::function<void(UnaryCall&)>;
  // Asks gRPC for one call of a method (the generated service's RequestX, bound): the call's
  // events on the first queue, its arrival on the second.
  using Requester =
      std::function<void(grpc::ServerContext*, grpc::ByteBuffer*, RawResponder*,
                         grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void* tag)>;
  struct Method {
    Requester request;
    Handler handler;  // Answers the call, once, through Finish, from any thread.
  };

  // Asks for the next call of `method` on `queue`. A call that comes asks for the next one
  // before it is handled, so `queue` keeps as many asked for as it was given. REQUIRES: the
  // server is started; `method` and `queue` outlive the call (CallQueue::ShutdownWhenEmpty).
  static void Await(const Method* method, CallQueue* queue);

  grpc::ServerContext& context() { return context_; }
  const grpc::ByteBuffer& request_bytes() const { return in_bytes_; }
  grpc::ByteBuffer* response_bytes() { return &out_bytes_; }
  // Fired when the client cancels or its connection drops.
  const std::shared_ptr<CancelSignal>& cancel() const { return cancel_; }

  // Ends the call: `status`, with response_bytes() when it is OK. Once, from any thread; the
  // thread then runs the call's events (CallQueue::DrainAnswers) and may free it there, so
  // the caller must not touch the call after.
  void Finish(const grpc::Status& status);

  // ModelInfer's messages, which its request points into until it is answered.
  inference::ModelInferRequest infer_in;
  inference::ModelInferResponse infer_out;

 private:
  using Event = MemberEvent<UnaryCall>;
  UnaryCall(const Method* method, CallQueue* queue);
  ~UnaryCall();
  void Arrived(bool ok);   // The call came (ok), or the server is shutting down.
  void Answered(bool ok);  // gRPC is done with Finish's status.
  void Ended(bool ok);     // The call is over: answered, cancelled or its connection gone.
  void Release();          // Deletes the call when both Answered and Ended have run.

  const Method* method_;
  CallQueue* queue_;
  grpc::ServerContext context_;
  RawResponder responder_;
  grpc::ByteBuffer in_bytes_;
  grpc::ByteBuffer out_bytes_;
  std::shared_ptr<CancelSignal> cancel_ = std::make_shared<CancelSignal>();
  Event arrived_{this, &UnaryCall::Arrived};
  Event answered_{this, &UnaryCall::Answered};
  Event ended_{this, &UnaryCall::Ended};
  std::atomic<int> refs_{2};  // Answered and Ended.
  bool came_ = false;         // Arrived(true) ran.
};

// `handle` run on `lane`, behind the calls already waiting there. A call whose client cancels
// (or whose connection drops) while it waits is answered CANCELLED and not handled; one the
// lane's bound refuses is answered RESOURCE_EXHAUSTED at once. REQUIRES: `lane` outlives the
// calls.
UnaryCall::Handler OnLane(CallLane* lane, UnaryCall::Handler handle);

// One bidirectional stream, its messages as bytes: what grpc++'s ServerBidiReactor offers,
// over the completion queue. At most one read and one write in flight at a time; Finish once,
// with no write in flight, also after a cancel (as with the reactor). OnDone runs last, once
// Finish is done, no operation is in flight and the call is over; the stream may delete
// itself there.
class StreamCall {
 public:
  using Requester = std::function<void(grpc::ServerContext*, RawStream*,
                                       grpc::ServerCompletionQueue*, void* tag)>;
  virtual ~StreamCall();

  // Asks gRPC for the next stream on `queue` into `stream` (new, owned by its events from
  // here); `next` makes the one to ask for after it. REQUIRES: the server is started.
  static void Await(StreamCall* stream, const Requester* request, std::function<StreamCall*()> next,
                    CallQueue* queue);

  void StartRead(grpc::ByteBuffer* into);
  void StartWrite(const grpc::ByteBuffer* message);
  void Finish(const grpc::Status& status);

 protected:
  grpc::ServerContext& context() { return context_; }
  virtual void OnStart() = 0;  // The stream came.
  virtual void OnReadDone(bool ok) = 0;
  virtual void OnWriteDone(bool ok) = 0;
  virtual void OnCancel() = 0;  // The client cancelled or its connection dropped.
  virtual void OnDone() = 0;

 private:
  using Event = MemberEvent<StreamCall>;
  void Arrived(bool ok);
  void ReadDone(bool ok);
  void WriteDone(bool ok);
  void Finished(bool ok);
  void Ended(bool ok);
  void Release();  // An operation (or the call's end) done: OnDone after the last.

  grpc::ServerContext context_;
  RawStream stream_{&context_};
  std::function<StreamCall*()> next_;
  const Requester* request_ = nullptr;
  CallQueue* queue_ = nullptr;
  Event arrived_{this, &StreamCall::Arrived};
  Event read_{this, &StreamCall::ReadDone};
  Event write_{this, &StreamCall::WriteDone};
  Event finished_{this, &StreamCall::Finished};
  Event ended_{this, &StreamCall::Ended};
  std::atomic<int> refs_{2};  // The call's end, Finish's, and each operation in flight.
};

}  // namespace ferry::frontend
