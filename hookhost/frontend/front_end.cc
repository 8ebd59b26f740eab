#include "hookhost/frontend/front_end.h"

namespace ferry::frontend {

Status FrontEnd::Start(const shm::Segment& segment, const std::vector<hookhost::HookModel>& models,
                       hookhost::HookHost* host, int http_fd, int grpc_fd,
                       const FrontendSettings& settings, const Authenticator* auth) {
  service_ = std::make_unique<KServeService>(segment, models, host, settings, auth);
  net::HttpServerOptions options;
  options.max_body_bytes = settings.max_request_bytes;
  options.max_connections = static_cast<size_t>(settings.max_connections);
  options.request_timeout_ns = static_cast<int64_t>(settings.request_timeout_seconds * 1e9);
  options.idle_timeout_ns = static_cast<int64_t>(settings.idle_timeout_seconds * 1e9);
  KServeService* s = service_.get();
  server_ = std::make_unique<net::HttpServer>(http_fd, options,
                                              [s](net::HttpRequest&& r, net::Responder respond) {
                                                s->Handle(std::move(r), std::move(respond));
                                              });
  thread_ = std::thread([this] { server_->Run(); });
  if (grpc_fd >= 0) {
    GrpcOptions grpc_options;
    grpc_options.max_message_bytes = settings.max_request_bytes;
    grpc_options.max_connections = static_cast<size_t>(settings.max_connections);
    grpc_options.max_streams = static_cast<int>(settings.max_streams_per_connection);
    grpc_options.idle_timeout_ms = static_cast<int64_t>(settings.idle_timeout_seconds * 1e3);
    grpc_ = std::make_unique<GrpcFrontEnd>(service_.get(), grpc_fd, grpc_options);
    return grpc_->Start();
  }
  return OkStatus();
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
  while (!server_->DrainSeen()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool FrontEnd::Drained() const { return server_ == nullptr || server_->Drained(); }

void FrontEnd::Stop(std::chrono::milliseconds wait) {
  if (server_ == nullptr) {
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (!server_->Drained() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  server_->Stop();
  thread_.join();
  server_.reset();
  if (grpc_ != nullptr) {
    grpc_->Stop(static_cast<int>(wait.count()));
    grpc_.reset();
  }
}

}  // namespace ferry::frontend
