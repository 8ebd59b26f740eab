// The writing side of one ModelStreamInfer stream, shared by its reactor (grpc_service.cc)
// and the hook threads that send a decoupled model's responses (hookhost.h on_response):
// messages are written one at a time in the order they were queued, none after the stream
// finished, and the next request is read only once every answer of the one in flight is
// written (a stream answers its requests in order).
//
// Thread safety: every method may be called from any thread. The stream must outlive the
// sink's calls into it: Finish is called once, never while a request is in flight (between
// BeginRequest and EndRequest: the reactor's answer callback still needs it), and after it no
// call reaches the reactor (Write answers CANCELLED), so the reactor may delete itself in
// OnDone while a hook thread still holds the sink.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "common/result.h"
#include "hookhost/frontend/grpc_calls.h"

namespace ferry::frontend {

class StreamSink {
 public:
  using Reactor = StreamCall;
  // Responses queued at most; a decoupled model's sender waits for room (a slow reader holds
  // it back rather than filling memory), at most kMaxWaitNs at a time.
  static constexpr size_t kMaxQueued = 64;
  static constexpr int64_t kMaxWaitNs = 5'000'000'000;

  explicit StreamSink(Reactor* reactor) : reactor_(reactor) {}

  // Queues a decoupled model's response behind those before it and starts writing it when
  // none is in flight. CANCELLED once the stream is finishing or was cancelled, or its
  // request closed (CloseRequest: nothing follows a request's end). With kMaxQueued queued,
  // waits for room; UNAVAILABLE when none came within kMaxWaitNs.
  Status WritePartial(grpc::ByteBuffer message);
  // Queues a request's answer (never waits: at most one per request) and closes the request.
  // Dropped once the stream is finishing.
  void WriteAnswer(grpc::ByteBuffer message);
  // The request in flight takes no more WritePartial (its end is being written).
  void CloseRequest();
  // A request is in flight: the stream is not finished until it ends.
  void BeginRequest();
  // The request in flight has no more answers: once the queue is written, the next request
  // is read (StartRead into `into`). REQUIRES: `into` lives as long as the reactor.
  void EndRequest(grpc::ByteBuffer* into);
  // The reactor's OnWriteDone: the next queued message, or the read EndRequest asked for; a
  // failed write (the client gone) drops the rest and finishes the stream once no request is
  // in flight.
  void WriteDone(bool ok);
  // Finishes the stream with `status` (once; later calls do nothing) and wakes waiting senders.
  void Finish(const grpc::Status& status);
  // The client cancelled: waiting senders and later Writes get CANCELLED.
  void Cancel();

 private:
  // Starts the next write or the pending read. REQUIRES: mutex_ held.
  void Advance();

  Reactor* reactor_;
  // Held while calling into the reactor, so no Finish interleaves with a StartWrite; recursive
  // in case gRPC runs a reaction inline on the calling thread.
  std::recursive_mutex mutex_;
  std::condition_variable_any room_;
  std::deque<grpc::ByteBuffer> queue_;  // queue_.front() is being written when writing_.
  bool writing_ = false;
  grpc::ByteBuffer* read_into_ = nullptr;  // A read to start once the queue is written.
  bool finished_ = false;
  bool finish_pending_ = false;  // Finish asked for while a write was in flight.
  grpc::Status finished_status_;
  bool cancelled_ = false;
  bool in_request_ = false;
  bool request_open_ = false;  // Takes WritePartial.
  bool broken_ = false;        // A write failed.
};

}  // namespace ferry::frontend
