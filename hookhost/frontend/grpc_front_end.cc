// GrpcFrontEnd: the server that carries the inference service (grpc_service.cc), fed by an
// accept thread on the inherited listening socket.
#include "hookhost/frontend/grpc_front_end.h"

#include <errno.h>
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/thread_name.h"
#include "hookhost/frontend/grpc_calls.h"
#include "hookhost/frontend/grpc_service.h"
#include "net/open_connections.h"

namespace ferry::frontend {
namespace {

constexpr int kMaxGrpcThreads = 64;
// A connection with no data either way for this long may be closed to admit a new one at the
// cap (the HTTP server's rule too).
constexpr uint32_t kEvictIdleMs = 1000;
// ModelInfer calls the queue keeps asked for: a burst of calls this large is matched at once,
// without waiting for a call to be asked for again (gRPC holds the rest until one is).
constexpr int kPendingInferCalls = 64;
// How long Stop waits, after the server stopped, for the calls it took to be answered (each is
// cancelled by then, and the hook host answers a cancelled request at once).
constexpr int64_t kCallsEndMs = 10'000;

}  // namespace

struct GrpcFrontEnd::Impl {
  KServeService* kserve;
  int listen_fd;
  GrpcOptions options;
  net::OpenConnections open;  // The accept thread's.
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> evicted{0};
  std::unique_ptr<InferenceService> service;
  std::unique_ptr<grpc::Server> server;
  // Every call's events, run by one thread (grpc_calls.h says why one); the methods that may
  // wait on ferryd run on the lane.
  std::unique_ptr<CallQueue> queue;
  std::unique_ptr<CallLane> lane;
  std::thread acceptor;
  int accept_epoll = -1;  // The accept thread's; the listening socket leaves it on Drain.
  std::atomic<bool> accepting{true};
  std::atomic<bool> stopping{false};
  // Draining: gRPC's shutdown, begun on its own thread (it blocks until the calls in
  // progress end), sends every client GOAWAY; `shut_down` once it has returned.
  std::thread drainer;
  std::atomic<bool> shutting_down{false};  // The drainer is about to call Shutdown.
  std::atomic<bool> shut_down{false};

  // Hands `fd` to gRPC, or closes it at the cap when no connection is idle enough to make
  // room. `subject`: its client certificate's, for the service (through TLS only).
  void Admit(int fd, const std::string* subject);
};

void GrpcFrontEnd::Impl::Admit(int fd, const std::string* subject) {
  if (open.AtLeast(options.max_connections)) {
    // The connection idle longest makes room (gRPC sees its end and closes it); only when
    // none has been idle kEvictIdleMs is the newcomer refused.
    int idlest = open.Idlest(kEvictIdleMs);
    if (idlest < 0) {
      refused.fetch_add(1, std::memory_order_relaxed);  // Counted before the client sees.
      close(fd);
      return;
    }
    shutdown(idlest, SHUT_RDWR);
    evicted.fetch_add(1, std::memory_order_relaxed);
  }
  open.Add(fd);
  if (subject != nullptr) {
    // gRPC names a connection made from a descriptor "fd:N" (ServerContext::peer).
    kserve->SetPeerSubject("fd:" + std::to_string(fd), *subject);
  }
  grpc::AddInsecureChannelFromFd(server.get(), fd);  // gRPC owns it now.
}

GrpcFrontEnd::GrpcFrontEnd(KServeService* service, int listen_fd, const GrpcOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->kserve = service;
  impl_->listen_fd = listen_fd;
  impl_->options = options;
}

uint64_t GrpcFrontEnd::refused_connections() const { return impl_->refused.load(); }
uint64_t GrpcFrontEnd::evicted_connections() const { return impl_->evicted.load(); }

GrpcFrontEnd::~GrpcFrontEnd() { Stop(0); }

Status GrpcFrontEnd::Start() {
  Impl& s = *impl_;
  s.service = MakeInferenceService(s.kserve);
  grpc::ServerBuilder builder;
  builder.RegisterService(s.service->grpc_service());
  s.queue = std::make_unique<CallQueue>(builder.AddCompletionQueue());
  int limit = static_cast<int>(std::min<size_t>(s.options.max_message_bytes, INT32_MAX));
  builder.SetMaxReceiveMessageSize(limit);
  builder.SetMaxSendMessageSize(INT32_MAX);
  // Every call runs on this front end's queue thread (grpc_calls.h): the server has no
  // synchronous or callback method, so gRPC starts no thread of its own for calls. The quota
  // bounds any it would start anyway.
  grpc::ResourceQuota quota("ferry-hookhost");
  quota.SetMaxThreads(kMaxGrpcThreads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, s.options.max_streams);
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(std::clamp<int64_t>(s.options.idle_timeout_ms, 1, INT32_MAX)));
  s.server = builder.BuildAndStart();
  if (s.server == nullptr) {
    return Internal("the gRPC server did not start");
  }
  s.lane = std::make_unique<CallLane>();
  s.service->Serve(s.queue.get(), s.lane.get(), kPendingInferCalls);
  s.queue->Start();
  if (s.listen_fd < 0) {
    return OkStatus();  // Connections come through Adopt.
  }
  s.accept_epoll = epoll_create1(EPOLL_CLOEXEC);
  epoll_event e{};
  e.events = EPOLLIN | EPOLLEXCLUSIVE;
  if (s.accept_epoll < 0 || epoll_ctl(s.accept_epoll, EPOLL_CTL_ADD, s.listen_fd, &e) != 0) {
    return Internal("the gRPC accept loop's epoll: " + std::string(strerror(errno)));
  }
  s.acceptor = std::thread([&s] {
    NameThisThread("ferry-grpc-acpt");
    while (!s.stopping.load()) {
      epoll_event got{};
      if (epoll_wait(s.accept_epoll, &got, 1, 50) != 1 || !s.accepting.load()) {
        continue;
      }
      int fd = accept4(s.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {  // Still readable: wait, do not spin.
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        continue;
      }
      s.Admit(fd, nullptr);
    }
  });
  return OkStatus();
}

void GrpcFrontEnd::Adopt(int fd, const std::string& subject) {
  if (impl_->accepting.load()) {
    impl_->Admit(fd, &subject);
  } else {
    close(fd);
  }
}

void GrpcFrontEnd::Drain() {
  Impl& s = *impl_;
  if (s.accepting.exchange(false) && s.accept_epoll >= 0) {
    // Off this host's epoll now, before any answer: the kernel wakes the other hook hosts for
    // a new connection, and a connection waiting does not spin this one's accept loop.
    epoll_ctl(s.accept_epoll, EPOLL_CTL_DEL, s.listen_fd, nullptr);
  }
  if (s.server == nullptr || s.drainer.joinable()) {
    return;
  }
  // GOAWAY at once: a client's next call opens a new connection (to another hook host, or
  // this one's successor) instead of reaching a host that is about to exit; the calls in
  // progress go on until they end or Stop cancels them.
  s.drainer = std::thread([&s] {
    s.shutting_down.store(true);
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::hours(24));
    s.shut_down.store(true);
  });
}

void GrpcFrontEnd::Stop(int deadline_ms) {
  Impl& s = *impl_;
  if (s.server == nullptr) {
    return;
  }
  s.accepting.store(false);
  s.stopping.store(true);
  if (s.acceptor.joinable()) {
    s.acceptor.join();
  }
  if (s.accept_epoll >= 0) {
    close(s.accept_epoll);
    s.accept_epoll = -1;
  }
  if (s.drainer.joinable()) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
    while (!s.shut_down.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    while (!s.shutting_down.load()) {  // Cancelling is meant for a server shutting down.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!s.shut_down.load()) {
      // Calls still open are cancelled: the drainer's wait ends once each has finished (every
      // handler finishes its call; a repository change is answered before this, FrontEnd::Stop).
      grpc_server_cancel_all_calls(s.server->c_server());
    }
    s.drainer.join();
  } else {
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  }
  s.server->Wait();
  // The server takes no more calls, but those it took may still start operations (a late
  // answer, a stream's last read, a call waiting on the lane): the queue is shut down once
  // every call is gone, its thread and the lane running meanwhile (grpc_calls.h, CallQueue).
  if (!s.queue->ShutdownWhenEmpty(kCallsEndMs)) {
    spdlog::error(
        "gRPC front end: {} call(s) still open {} ms after the server stopped; left "
        "to the process's exit",
        s.queue->calls(), kCallsEndMs);
    // Their operations point into these: leaked rather than freed under them.
    (void)s.lane.release();
    (void)s.queue.release();
    (void)s.server.release();
    (void)s.service.release();
    return;
  }
  s.lane.reset();
  s.server.reset();
  s.queue.reset();
}

}  // namespace ferry::frontend
