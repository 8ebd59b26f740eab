// The gRPC service's completion-queue plumbing: the call lane's order and bound (a call past
// it refused, one cancelled while it waits not run and its cancel seen with nothing else
// answered), a queue that is shut down only once its calls are gone (a late answer after the
// server stopped), a call's own events run by whoever drains them (the queue's thread held),
// and a GrpcFrontEnd whose one queue thread serves calls and streams and ends them all at Stop
// (a stream left open, a burst of calls on one connection).
#include "hookhost/frontend/grpc_calls.h"

#include <doctest/doctest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "hookhost/frontend/grpc_front_end.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"
#include "tests/testing/hold_thread.h"
#include "tests/testing/loopback.h"

namespace ferry::frontend {
namespace {

TEST_CASE("the call lane runs tasks in order on its own thread") {
  std::vector<int> order;
  std::thread::id ran_on;
  {
    CallLane lane;
    for (int i = 0; i < 5; ++i) {
      REQUIRE(lane.Post([&, i] {
        order.push_back(i);
        ran_on = std::this_thread::get_id();
      }));
    }
  }  // The destructor runs what is queued.
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(ran_on != std::this_thread::get_id());
}

TEST_CASE("the call lane holds at most kMaxQueued waiting; the rest are refused, not queued") {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  std::promise<void> started;
  {
    CallLane lane;
    REQUIRE(lane.Post([&] {
      started.set_value();
      released.wait();  // Holds the lane, as a call waiting on ferryd would.
    }));
    started.get_future().wait();
    for (size_t i = 0; i < CallLane::kMaxQueued; ++i) {
      REQUIRE(lane.Post([&] { ran.fetch_add(1); }));
    }
    CHECK_FALSE(lane.Post([&] { ran.fetch_add(1000); }));
    release.set_value();
  }
  CHECK(ran.load() == static_cast<int>(CallLane::kMaxQueued));
}

// A server of ServerLive alone, on one CallQueue, each call handed to `handler` as it comes.
struct LiveServer {
  using LiveOnly = inference::GRPCInferenceService::WithRawMethod_ServerLive<
      inference::GRPCInferenceService::Service>;
  LiveOnly service;
  int port = 0;
  std::unique_ptr<CallQueue> queue;
  std::unique_ptr<grpc::Server> server;
  UnaryCall::Method method;
  std::atomic<UnaryCall*> last{nullptr};  // The call that came last, as it came.
  std::atomic<int> came{0};
  bool stopped = false;  // By the test: the destructor leaves it be.

  explicit LiveServer(UnaryCall::Handler handler) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    queue = std::make_unique<CallQueue>(builder.AddCompletionQueue());
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    method = {[this](grpc::ServerContext* context, grpc::ByteBuffer* in, RawResponder* responder,
                     grpc::CompletionQueue* call_queue, grpc::ServerCompletionQueue* arrivals,
                     void* tag) {
                service.RequestServerLive(context, in, responder, call_queue, arrivals, tag);
              },
              [this, handler = std::move(handler)](UnaryCall& call) {
                last.store(&call);
                came.fetch_add(1);
                handler(call);
              }};
    UnaryCall::Await(&method, queue.get());
    queue->Start();
  }
  ~LiveServer() {
    if (!stopped) {
      server->Shutdown(std::chrono::system_clock::now());
      server->Wait();
      CHECK(queue->ShutdownWhenEmpty(5000));
    }
  }
  // One ServerLive call, cancelled by the client once `cancel_when` is ready (if valid).
  grpc::Status Call(std::shared_future<void> cancel_when = {}) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, "/inference.GRPCInferenceService/ServerLive", grpc::StubOptions(),
                   &request, &response, [&](grpc::Status s) { done.set_value(s); });
    if (cancel_when.valid()) {
      cancel_when.wait();
      context.TryCancel();
    }
    return done.get_future().get();
  }
  // Waits up to 10 s for the `n`th call to come.
  bool AwaitCalls(int n) {
    for (int i = 0; i < 1000 && came.load() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return came.load() >= n;
  }
};

TEST_CASE("the queue is shut down only once its calls are gone, a late answer included") {
  LiveServer live([](UnaryCall&) {});  // Not answered: held open.
  std::future<grpc::Status> done = std::async(std::launch::async, [&] { return live.Call(); });
  REQUIRE(live.AwaitCalls(1));
  UnaryCall* call = live.last.load();

  // The server stops (the open call cancelled after 50 ms) while the call is still ours.
  live.stopped = true;
  std::thread stopper([&] {
    live.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(50));
  });
  CHECK_FALSE(live.queue->ShutdownWhenEmpty(300));  // Not while the call lives.
  CHECK(live.queue->calls() >= 1);
  call->Finish(grpc::Status::OK);  // The late answer: an operation on the queue.
  stopper.join();
  live.server->Wait();
  CHECK(live.queue->ShutdownWhenEmpty(5000));
  CHECK(live.queue->calls() == 0);
  CHECK_FALSE(done.get().ok());  // Cancelled by the server's stop.
}

TEST_CASE("a call's answer and end are run by whoever drains them, not by the queue's thread") {
  std::promise<void> release_promise;
  std::shared_future<void> released = release_promise.get_future().share();
  std::atomic<int> handled{0};
  LiveServer live([&](UnaryCall& call) {
    if (handled.fetch_add(1) == 0) {
      return;  // The first call is held, answered by the test.
    }
    released.wait();  // The second holds the queue's thread.
    call.Finish(grpc::Status::OK);
  });
  std::promise<void> release = std::move(release_promise);  // Set (or destroyed) before futures.
  std::future<grpc::Status> first = std::async(std::launch::async, [&] { return live.Call(); });
  REQUIRE(live.AwaitCalls(1));
  UnaryCall* held = live.last.load();
  std::future<grpc::Status> second = std::async(std::launch::async, [&] { return live.Call(); });
  REQUIRE(live.AwaitCalls(2));  // The queue's thread is in the second call's handler now.
  size_t before = live.queue->calls();
  held->Finish(grpc::Status::OK);  // From this thread, with the queue's thread busy.
  for (int i = 0; i < 1000 && live.queue->calls() >= before; ++i) {
    live.queue->DrainAnswers();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(live.queue->calls() == before - 1);  // Freed without the queue's thread.
  CHECK(first.get().ok());
  release.set_value();
  CHECK(second.get().ok());
}

// Holds `lane` until the returned promise is set (or destroyed).
std::promise<void> HoldLane(CallLane& lane) {
  return testing::HoldThread([&lane](auto task) { REQUIRE(lane.Post(std::move(task))); });
}

// Waits until `lane` has run everything posted before this returns.
void DrainLane(CallLane& lane) {
  auto ran = std::make_shared<std::promise<void>>();
  while (!lane.Post([ran] { ran->set_value(); })) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ran->get_future().wait();
}

TEST_CASE("a call cancelled while it waits for the lane is answered CANCELLED, not run") {
  CallLane lane;
  std::atomic<int> ran{0};
  LiveServer server(OnLane(&lane, [&](UnaryCall& call) {
    ran.fetch_add(1);
    call.Finish(grpc::Status::OK);
  }));
  CHECK(server.Call().ok());  // Handled on the lane.
  CHECK(ran.load() == 1);

  std::promise<void> release = HoldLane(lane);
  std::promise<void> cancel_promise;
  std::shared_future<void> cancelled = cancel_promise.get_future().share();
  std::future<grpc::Status> status =
      std::async(std::launch::async, [&server, cancelled] { return server.Call(cancelled); });
  // Destroyed before `status` when a REQUIRE fails, so the call is cancelled, not waited for.
  std::promise<void> cancel = std::move(cancel_promise);
  // The call waits on the lane (it cannot be answered, so it lives); the client cancels it.
  REQUIRE(server.AwaitCalls(2));
  UnaryCall* waiting = server.last.load();
  cancel.set_value();
  CHECK(status.get().error_code() == grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 1000 && !waiting->cancel()->fired(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(waiting->cancel()->fired());  // gRPC told the server.
  release.set_value();
  for (int i = 0; i < 1000 && server.queue->calls() > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(server.queue->calls() == 1);  // Answered and gone; the next call asked for is left.
  CHECK(ran.load() == 1);             // The cancelled one was not run.
}

TEST_CASE("a call beyond the lane's bound is answered RESOURCE_EXHAUSTED at once") {
  CallLane lane;
  LiveServer server(OnLane(&lane, [](UnaryCall& call) { call.Finish(grpc::Status::OK); }));
  std::promise<void> release = HoldLane(lane);
  for (size_t i = 0; i < CallLane::kMaxQueued; ++i) {
    REQUIRE(lane.Post([] {}));
  }
  grpc::Status refused = server.Call();
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(refused.error_message().find("try again") != std::string::npos);
  release.set_value();
  DrainLane(lane);  // Room again.
  CHECK(server.Call().ok());
}

// A listening socket on 127.0.0.1 at a free port (tests/testing/loopback.h).
int Listen(uint16_t* port) {
  int fd = testing::ListenLoopback(port);
  REQUIRE(fd >= 0);
  return fd;
}

TEST_CASE("one connection's burst of calls is answered whole by the one queue thread") {
  uint16_t port = 0;
  int listener = Listen(&port);
  GrpcFrontEnd front(nullptr, listener, GrpcOptions{});  // ServerLive needs no service.
  REQUIRE(front.Start().ok());
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // More at once than calls of a method are asked for (one): gRPC holds the rest until the
  // queue thread asks again, and none is lost or answered twice.
  constexpr int kCalls = 300;
  std::vector<grpc::ClientContext> contexts(kCalls);
  std::vector<grpc::ByteBuffer> responses(kCalls);
  std::atomic<int> ok{0}, failed{0};
  std::promise<void> all;
  std::atomic<int> left{kCalls};
  for (int i = 0; i < kCalls; ++i) {
    grpc::Slice empty("");  // The empty message: a valid ServerLiveRequest.
    grpc::ByteBuffer request(&empty, 1);
    stub.UnaryCall(&contexts[i], "/inference.GRPCInferenceService/ServerLive", grpc::StubOptions(),
                   &request, &responses[i], [&](grpc::Status s) {
                     (s.ok() ? ok : failed).fetch_add(1);
                     if (left.fetch_sub(1) == 1) {
                       all.set_value();
                     }
                   });
  }
  REQUIRE(all.get_future().wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(ok.load() == kCalls);
  CHECK(failed.load() == 0);
  front.Stop(0);
  close(listener);
}

TEST_CASE("a stream left open and a call in flight end at Stop; Stop returns") {
  uint16_t port = 0;
  int listener = Listen(&port);
  GrpcFrontEnd front(nullptr, listener, GrpcOptions{});
  REQUIRE(front.Start().ok());
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  // A stream that sends nothing: its reader waits on the server's queue until Stop.
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream =
      stub.PrepareCall(&context, "/inference.GRPCInferenceService/ModelStreamInfer", &cq);
  stream->StartCall(reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  REQUIRE(cq.Next(&tag, &ok));
  REQUIRE(ok);  // The stream is open.
  auto started = std::chrono::steady_clock::now();
  front.Stop(100);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  grpc::Status status;
  stream->Finish(&status, reinterpret_cast<void*>(2));
  REQUIRE(cq.Next(&tag, &ok));
  CHECK(tag == reinterpret_cast<void*>(2));
  CHECK_FALSE(status.ok());  // Cancelled or unavailable: the server went away.
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  close(listener);
}

}  // namespace
}  // namespace ferry::frontend
