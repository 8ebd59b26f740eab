// TLS for the front end, with OpenSSL: the server context a TLS relay (tls_relay.h) hands
// every new connection, built from PEM text (the hook host cannot open files inside its
// sandbox: ferryd reads them and publishes the text, shm/tls_store.h), and the verified client
// certificate's subject, which [tenants.NAME] tls_subjects maps to a tenant.
//
// The context offers TLS 1.2 and 1.3 only, with OpenSSL's default ciphers for them, no
// renegotiation and no session tickets (nothing to rotate). With a client CA it requires a
// client certificate that chains to it (mutual TLS): a connection without one fails its
// handshake. ALPN picks the protocol of the listener the connection came to ("h2" for gRPC,
// "http/1.1" for HTTP) when the client offers it, and none otherwise.
//
// Thread safety: a built context is immutable and shared (std::shared_ptr) by the
// connections made from it; the functions are pure.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace ferry::net {

struct TlsMaterial {
  std::string cert_chain_pem;  // The server certificate first, then its intermediates.
  std::string key_pem;         // Its private key (unencrypted PEM).
  std::string client_ca_pem;   // Empty: no client certificate asked for.
  bool operator==(const TlsMaterial&) const = default;
};

using TlsContext = std::shared_ptr<SSL_CTX>;

// INVALID_ARGUMENT naming what is wrong: no certificate, a key that is not PEM or does not
// match the certificate, a client CA with no certificate in it.
Result<TlsContext> MakeServerContext(const TlsMaterial& material);

// The protocol ALPN selects for `ssl` (a static string: "h2" or "http/1.1"). REQUIRES: set
// before the handshake; the string outlives the connection.
void SetListenerProtocol(SSL* ssl, const char* alpn);

// The subject of the client certificate `ssl` verified, in RFC 2253 form
// ("CN=alice,O=Acme"); empty when the client sent none or it did not verify.
std::string PeerSubject(SSL* ssl);

// OpenSSL's error queue as one line (and emptied); "unknown" when empty.
std::string TakeSslErrors();

}  // namespace ferry::net
