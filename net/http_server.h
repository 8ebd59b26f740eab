// A small HTTP/1.1 server for the front end: one I/O thread, an epoll loop over a listening
// socket it was handed (created by ferryd, shared by every hook host) and its connections.
// Requests are parsed by Boost.Beast's parser (bounded header and body); answers may come
// from any thread, in any order, and are written in request order (pipelining-safe).
//
// Hostile clients (every connection is one): the header is at most max_header_bytes and the
// body max_body_bytes (413 and close beyond); a request must arrive whole within
// request_timeout (408 and close: slowloris); an idle keep-alive connection is closed after
// idle_timeout; at most max_connections: at the limit a new connection closes the one idle
// longest (at least min_idle_to_evict; nginx reuses idle keep-alive connections the same way),
// so idle connections cannot lock new clients out, and only when every connection is busy is
// the new one answered 503 and closed (the backlog never fills); a connection is closed
// after max_keepalive_requests answers, so clients reconnect and spread again over the hook
// hosts (after one restarts, say); at most max_pipelined requests in flight per connection
// (reading pauses until answers go out); a client that does not read its answers is closed
// once max_unsent_bytes wait. Memory is bounded by
// max_connections * (max_header_bytes + max_body_bytes + max_unsent_bytes).
//
// Thread safety: Run on one thread; Respond (through the Responder) and Drain/Stop from any.
// Lifetime: the handler and anything it captures outlive Run; a Responder may outlive its
// connection (its answer is then dropped).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cancel_signal.h"

namespace ferry::net {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string target;                                        // "/v2/models/mlp/infer"
  std::vector<std::pair<std::string, std::string>> headers;  // As received.
  std::string body;
  // The verified client certificate's subject (RFC 2253) when the connection came through
  // TLS with one (net/tls_relay.h); empty otherwise.
  std::string tls_subject;
  // Fired when the client closes its connection (or it fails) before this request's answer
  // was handed back: a client that left. A half-close (shutdown(SHUT_WR)) counts as leaving,
  // as nginx takes it (HTTP/1.1 clients close when they give up).
  std::shared_ptr<CancelSignal> cancel;

  // The first header named `name` (case-insensitive), or nullptr.
  const std::string* Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Length is added.
  std::string body;
  bool close = false;  // Close the connection after this answer.
};

// Answers one request; call exactly once, from any thread.
using Responder = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(HttpRequest&&, Responder)>;

struct HttpServerOptions {
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 64 << 20;
  size_t max_connections = 1024;
  size_t max_pipelined = 64;
  size_t max_unsent_bytes = 256 << 20;
  int64_t request_timeout_ns = 30'000'000'000;
  int64_t idle_timeout_ns = 60'000'000'000;
  int64_t min_idle_to_evict_ns = 1'000'000'000;
  uint64_t max_keepalive_requests = 1000;
};

struct HttpServerStats {
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> refused_connections{0};
  std::atomic<uint64_t> evicted_idle{0};  // Idle connections closed to admit a new one.
  std::atomic<uint64_t> bad_requests{0};  // Unparsable, too large or too slow: closed.
  std::atomic<uint64_t> bytes_read{0};    // From clients' sockets.
};

// Draining: an idle connection is closed after this, so a request its client was sending as
// the drain began is still read and answered rather than met by a close.
inline constexpr int64_t kDrainGraceNs = 200'000'000;

class HttpServer {
 public:
  // REQUIRES: `listen_fd` is a listening stream socket, or -1 for a server of adopted
  // connections only (behind a TLS relay); the server makes it non-blocking and does not
  // close it (the caller owns it).
  HttpServer(int listen_fd, HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves until Stop. Returns at once when Stop was called before.
  void Run();
  // Serves the connected socket `fd` (non-blocking; the server owns it from now, and closes
  // it when draining) as if accepted, its requests carrying `tls_subject`. Any thread.
  void Adopt(int fd, std::string tls_subject);
  // Stops accepting. Requests on open connections are still read, handed to the handler and
  // answered, each answer closing its connection; an idle connection is closed after a short
  // grace (a request its client was sending is read, not met by a close).
  void Drain();
  // True once Run has seen Drain: a handler call begun before it has returned, and every
  // later request is marked to close its connection.
  bool DrainSeen() const;
  // True once draining and nothing is in flight or unwritten.
  bool Drained() const;
  // Ends Run (after the current turn); open connections are closed.
  void Stop();
  const HttpServerStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "200 OK", "404 Not Found", ... for the codes the front end uses.
std::string_view StatusText(int status);

}  // namespace ferry::net
