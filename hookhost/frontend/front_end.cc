#include "hookhost/frontend/front_end.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <mutex>

#include "common/thread_name.h"

namespace ferry::frontend {
namespace {

// The relay's certificate source: the store's text, rebuilt into a context when ferryd
// publishes new text; a text that does not build keeps the last good context (ferryd checks
// before it publishes, so that is a scribbled store).
net::ContextSource StoreContexts(const shm::TlsStore* store) {
  struct Cache {
    std::mutex mu;
    uint64_t sequence = 0;
    net::TlsContext context;
  };
  auto cache = std::make_shared<Cache>();
  return [store, cache]() -> net::TlsContext {
    std::lock_guard<std::mutex> lock(cache->mu);
    uint64_t sequence = store->sequence();
    if (sequence != cache->sequence) {
      Result<shm::TlsPems> pems = store->Read();
      Result<net::TlsContext> built =
          pems.ok() ? net::MakeServerContext({pems->cert_chain, pems->key, pems->client_ca})
                    : Result<net::TlsContext>(pems.error());
      if (built.ok()) {
        cache->context = *built;
        cache->sequence = pems->sequence;
      } else {
        spdlog::error("TLS: the published certificate is unusable ({}); keeping the last",
                      built.error().ToString());
        cache->sequence = sequence;
      }
    }
    return cache->context;
  };
}

}  // namespace

Status FrontEnd::Start(const shm::Segment& segment, const std::vector<hookhost::HookModel>& models,
                       hookhost::HookHost* host, int http_fd, int grpc_fd,
                       const FrontendSettings& settings, const Authenticator* auth,
                       const shm::TlsStore* tls, shm::TraceStore* traces, ClientRegions* regions) {
  service_ =
      std::make_unique<KServeService>(segment, models, host, settings, auth, traces, regions);
  net::HttpServerOptions options;
  options.max_body_bytes = settings.max_request_bytes;
  options.max_connections = static_cast<size_t>(settings.max_connections);
  options.request_timeout_ns = static_cast<int64_t>(settings.request_timeout_seconds * 1e9);
  options.idle_timeout_ns = static_cast<int64_t>(settings.idle_timeout_seconds * 1e9);
  KServeService* s = service_.get();
  server_ = std::make_unique<net::HttpServer>(tls != nullptr ? -1 : http_fd, options,
                                              [s](net::HttpRequest&& r, net::Responder respond) {
                                                s->Handle(std::move(r), std::move(respond));
                                              });
  thread_ = std::thread([this] {
    NameThisThread("ferry-http");
    server_->Run();
  });
  if (grpc_fd >= 0) {
    GrpcOptions grpc_options;
    grpc_options.max_message_bytes = settings.max_request_bytes;
    grpc_options.max_connections = static_cast<size_t>(settings.max_connections);
    grpc_options.max_streams = static_cast<int>(settings.max_streams_per_connection);
    grpc_options.idle_timeout_ms = static_cast<int64_t>(settings.idle_timeout_seconds * 1e3);
    grpc_ =
        std::make_unique<GrpcFrontEnd>(service_.get(), tls != nullptr ? -1 : grpc_fd, grpc_options);
    FERRY_RETURN_IF_ERROR(grpc_->Start());
  }
  if (tls == nullptr) {
    return OkStatus();
  }
  net::TlsRelayOptions relay_options;
  relay_options.max_connections = 2 * static_cast<size_t>(settings.max_connections);
  relay_ = std::make_unique<net::TlsRelay>(StoreContexts(tls), relay_options);
  // The relay outlives the servers it feeds (their last answers go out through it): past
  // Stop, a handshake that finishes late is closed, not handed to a server that is gone.
  gate_ = std::make_shared<AdoptGate>();
  net::HttpServer* http = server_.get();
  relay_->AddListener(http_fd, "http/1.1",
                      [gate = gate_, http](int fd, const std::string& subject) {
                        std::lock_guard<std::mutex> lock(gate->mu);
                        gate->open ? http->Adopt(fd, subject) : (void)close(fd);
                      });
  if (grpc_ != nullptr) {
    GrpcFrontEnd* grpc = grpc_.get();
    relay_->AddListener(grpc_fd, "h2", [gate = gate_, grpc](int fd, const std::string& subject) {
      std::lock_guard<std::mutex> lock(gate->mu);
      gate->open ? grpc->Adopt(fd, subject) : (void)close(fd);
    });
  }
  return relay_->Start();
}

void FrontEnd::Drain() {
  if (server_ == nullptr) {
    return;
  }
  service_->SetDraining();
  server_->Drain();
  if (grpc_ != nullptr) {
    grpc_->Drain();
  }
  if (relay_ != nullptr) {
    relay_->Drain();
  }
  while (!server_->DrainSeen()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  service_->SetDrainSeen();
}

bool FrontEnd::Drained() const {
  // A repository call is answered before the host exits (its client waits for it).
  return server_ == nullptr || (server_->Drained() && !service_->RepositoryChangePending());
}

void FrontEnd::Stop(std::chrono::milliseconds wait) {
  if (server_ == nullptr) {
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (!server_->Drained() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (gate_ != nullptr) {
    std::lock_guard<std::mutex> lock(gate_->mu);
    gate_->open = false;  // No connection reaches a server from here on.
  }
  service_->CancelRepositoryChange();  // Its gRPC call ends only when answered.
  server_->Stop();
  thread_.join();
  server_.reset();
  if (grpc_ != nullptr) {
    grpc_->Stop(static_cast<int>(wait.count()));
    grpc_.reset();
  }
  if (relay_ != nullptr) {
    relay_->Stop();  // Last: the servers' final answers went out through it.
    relay_.reset();
  }
}

}  // namespace ferry::frontend
