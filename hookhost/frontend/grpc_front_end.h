// The gRPC front end of a hook host: a gRPC server carrying the inference service
// (grpc_service.h) on connections from an inherited listening socket (ferryd's, shared by
// every hook host): an accept thread hands each accepted connection to gRPC
// (AddInsecureChannelFromFd), so the sandbox never needs to create a socket. Messages up to
// [frontend] max_request_bytes are accepted.
//
// Connections are bounded: at most max_connections open at once. At the cap the connection
// idle longest (no data either way for 1 s or more) is closed to admit a new one; when none
// is, the newcomer is accepted and closed at once, so the listening backlog never fills with
// connections nobody serves and clients fail fast and retry (the HTTP server's rules); a connection
// with no call for idle_timeout_ms is closed by gRPC (GOAWAY); a connection carries at most
// max_streams calls at once; out of descriptors (EMFILE), the accept thread waits 50 ms instead of
// spinning on the still-readable listening socket.
//
// Thread safety: Start once, Drain/Stop from any thread. Lifetime: the service outlives it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "hookhost/frontend/kserve_service.h"

namespace ferry::frontend {

struct GrpcOptions {
  size_t max_message_bytes = 64 << 20;
  size_t max_connections = 1024;
  int max_streams = 100;
  int64_t idle_timeout_ms = 60'000;
};

class GrpcFrontEnd {
 public:
  // `listen_fd` -1: no accept thread; connections come through Adopt (behind a TLS relay).
  GrpcFrontEnd(KServeService* service, int listen_fd, const GrpcOptions& options);
  ~GrpcFrontEnd();
  GrpcFrontEnd(const GrpcFrontEnd&) = delete;
  GrpcFrontEnd& operator=(const GrpcFrontEnd&) = delete;

  // Builds the server and starts accepting. INTERNAL when gRPC cannot start.
  Status Start();
  // Serves the connected socket `fd` (gRPC owns it from now; closed when draining) whose
  // client certificate subject is `subject` (empty: none), under the same cap as accepted
  // ones. REQUIRES: constructed with listen_fd -1; called from one thread (the relay's).
  void Adopt(int fd, const std::string& subject);
  // Stops accepting connections and sends every client GOAWAY (its next call goes to a new
  // connection); calls in progress finish. One thread (the hook host's main one).
  void Drain();
  // Ends every call (waits up to `deadline_ms` for those in progress) and the accept thread.
  void Stop(int deadline_ms);
  // Connections closed at once because max_connections were open, none of them idle.
  uint64_t refused_connections() const;
  // Idle connections closed to make room for a new one at max_connections.
  uint64_t evicted_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::frontend
