// TlsRelay: TLS termination in front of the plaintext servers (HttpServer, gRPC), on one
// epoll thread. It accepts on the listening sockets it is given, runs each handshake
// (OpenSSL, non-blocking), then makes a Unix socket pair, hands one end to the listener's
// sink as if it were the accepted connection, and relays bytes both ways: records read from
// the client decrypted into the pair, what the server writes encrypted to the client.
//
// Why a relay and not TLS inside each server: gRPC takes a sandboxed hook host's connections
// through AddInsecureChannelFromFd, which has no TLS variant (the sandbox cannot create a
// listening socket for gRPC's own TLS listener), and one relay gives HTTP and gRPC the same
// TLS, certificate reload and client-certificate rule (docs/security.md, "TLS").
//
// Hostile clients: a handshake must finish within handshake_timeout (closed otherwise: a
// client that connects and sends nothing holds no slot for long); plaintext to the TLS port
// fails its handshake and is closed; at most max_connections connections, handshaking or
// relayed, beyond which a new one is closed at once; at most 16 KiB is held per direction per
// connection (reading pauses until it is written on), so memory is bounded by
// max_connections * 32 KiB plus OpenSSL's buffers. A certificate is read from `contexts` at
// each accept: a reloaded one applies to new connections, open ones keep theirs.
//
// Thread safety: Start, Drain and Stop from one thread; the sinks run on the relay's thread.
// Lifetime: the sinks and `contexts` outlive Stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "net/tls_context.h"

namespace ferry::net {

struct TlsRelayOptions {
  size_t max_connections = 2048;
  int64_t handshake_timeout_ns = 10'000'000'000;
};

struct TlsRelayStats {
  std::atomic<uint64_t> handshakes{0};         // Completed.
  std::atomic<uint64_t> failed_handshakes{0};  // Refused, timed out or not TLS at all.
  std::atomic<uint64_t> refused_connections{0};
};

// Takes the plaintext end of a new connection (the callee owns it, non-blocking,
// close-on-exec) and the verified client certificate's subject (empty: none, PeerSubject).
using PlainSink = std::function<void(int plain_fd, const std::string& subject)>;
// The context for the next connection (the latest certificate); null refuses it.
using ContextSource = std::function<TlsContext()>;

class TlsRelay {
 public:
  TlsRelay(ContextSource contexts, TlsRelayOptions options);
  ~TlsRelay();
  TlsRelay(const TlsRelay&) = delete;
  TlsRelay& operator=(const TlsRelay&) = delete;

  // REQUIRES: before Start; `listen_fd` a listening stream socket the caller owns (made
  // non-blocking here), `alpn` a static "h2" or "http/1.1" (tls_context.h).
  void AddListener(int listen_fd, const char* alpn, PlainSink sink);
  // Starts the relay's thread. INTERNAL when its descriptors cannot be made.
  Status Start();
  // Stops accepting; open connections are still relayed. A no-op before Start.
  void Drain();
  // Closes every connection and joins the thread. A no-op before Start and after Stop.
  void Stop();
  const TlsRelayStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::net
