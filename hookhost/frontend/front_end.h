// A hook host's KServe v2 front end on listening sockets ferryd hands down: HTTP on its own
// I/O thread, gRPC on gRPC's threads (fed by an accept thread), both calling one
// KServeService over the hook host's request flow.
//
// Thread safety: Start, Drain, Drained and Stop are called from one thread (the hook host's
// control loop). Lifetime: the HookHost, segment and models given to Start outlive Stop.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "config/node_config.h"
#include "hookhost/frontend/grpc_front_end.h"
#include "hookhost/frontend/kserve_service.h"
#include "net/http_server.h"
#include "net/tls_relay.h"
#include "shm/tls_store.h"

namespace ferry::frontend {

class FrontEnd {
 public:
  FrontEnd() = default;
  ~FrontEnd() { Stop(std::chrono::milliseconds(0)); }
  FrontEnd(const FrontEnd&) = delete;
  FrontEnd& operator=(const FrontEnd&) = delete;

  // Serves HTTP on `http_fd` and, when `grpc_fd` >= 0, gRPC on it; `auth` (nullptr: none)
  // decides who may call what and outlives the front end. `tls` (nullptr: plaintext): both
  // ports speak TLS only, through a relay (net/tls_relay.h) whose certificate is the store's
  // latest; the store outlives the front end. `regions` (nullptr: none): the system
  // shared-memory extension's socket to ferryd, outliving the front end. REQUIRES: called once.
  Status Start(const shm::Segment& segment, const std::vector<hookhost::HookModel>& models,
               hookhost::HookHost* host, int http_fd, int grpc_fd, const FrontendSettings& settings,
               const Authenticator* auth = nullptr, const shm::TlsStore* tls = nullptr,
               shm::TraceStore* traces = nullptr, ClientRegions* regions = nullptr);
  // No request reaches the flow after this returns; those read are still answered. A no-op
  // before Start.
  void Drain();
  // Every request read has been answered and written (true before Start).
  bool Drained() const;
  // Writes what was answered (within `wait`), then closes every connection. A no-op before
  // Start and after the first Stop.
  void Stop(std::chrono::milliseconds wait);

 private:
  std::unique_ptr<KServeService> service_;
  std::unique_ptr<net::HttpServer> server_;
  std::unique_ptr<GrpcFrontEnd> grpc_;
  std::unique_ptr<net::TlsRelay> relay_;  // With TLS: stopped after the servers it feeds.
  struct AdoptGate {
    std::mutex mu;
    bool open = true;  // The servers take the relay's connections (false from Stop on).
  };
  std::shared_ptr<AdoptGate> gate_;
  std::thread thread_;
};

}  // namespace ferry::frontend
