#include "net/tls_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstring>
#include <vector>

namespace ferry::net {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every certificate in `pem`, in order.
std::vector<X509Ptr> ReadCertificates(const std::string& pem) {
  std::vector<X509Ptr> out;
  BioPtr bio = MemoryBio(pem);
  while (bio != nullptr) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) {
      break;
    }
    out.push_back(std::move(cert));
  }
  ERR_clear_error();  // The end of the text reads as an error.
  return out;
}

// ALPN: the listener's protocol when the client offers it; otherwise none (the handshake
// goes on without ALPN, as curl without --http2 expects).
int SelectProtocol(SSL* ssl, const unsigned char** out, unsigned char* out_len,
                   const unsigned char* in, unsigned int in_len, void*) {
  const char* wanted = static_cast<const char*>(SSL_get_app_data(ssl));
  if (wanted == nullptr) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  size_t wanted_len = std::strlen(wanted);
  for (unsigned int i = 0; i < in_len;) {
    unsigned int len = in[i];
    if (i + 1 + len > in_len) {
      break;  // A malformed list: OpenSSL checks it too.
    }
    if (len == wanted_len && std::memcmp(in + i + 1, wanted, len) == 0) {
      *out = in + i + 1;
      *out_len = static_cast<unsigned char>(len);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

Status LoadChain(SSL_CTX* ctx, const std::string& pem) {
  std::vector<X509Ptr> chain = ReadCertificates(pem);
  if (chain.empty()) {
    return InvalidArgument("tls_cert: no PEM certificate in it");
  }
  if (SSL_CTX_use_certificate(ctx, chain[0].get()) != 1) {
    return InvalidArgument("tls_cert: the certificate is refused: " + TakeSslErrors());
  }
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) {
      return InvalidArgument("tls_cert: intermediate " + std::to_string(i) +
                             " is refused: " + TakeSslErrors());
    }
  }
  return OkStatus();
}

Status LoadKey(SSL_CTX* ctx, const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  // No passphrase callback: an encrypted key fails here rather than prompting.
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      bio ? PEM_read_bio_PrivateKey(
                bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr)
          : nullptr);
  if (key == nullptr) {
    return InvalidArgument("tls_key: not an unencrypted PEM private key: " + TakeSslErrors());
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return InvalidArgument("tls_key: does not match tls_cert's certificate: " + TakeSslErrors());
  }
  return OkStatus();
}

Status LoadClientCa(SSL_CTX* ctx, const std::string& pem) {
  std::vector<X509Ptr> cas = ReadCertificates(pem);
  if (cas.empty()) {
    return InvalidArgument("tls_client_ca: no PEM certificate in it");
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
  for (const X509Ptr& ca : cas) {
    if (X509_STORE_add_cert(store, ca.get()) != 1) {
      sk_X509_NAME_pop_free(names, X509_NAME_free);
      return InvalidArgument("tls_client_ca: a certificate is refused: " + TakeSslErrors());
    }
    sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(ca.get())));
  }
  SSL_CTX_set_client_CA_list(ctx, names);  // Takes `names`.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_verify_depth(ctx, 8);
  return OkStatus();
}

}  // namespace

std::string TakeSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(e, line, sizeof(line));
    out += out.empty() ? "" : "; ";
    out += line;
  }
  return out.empty() ? "unknown" : out;
}

Result<TlsContext> MakeServerContext(const TlsMaterial& material) {
  ERR_clear_error();
  TlsContext ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (ctx == nullptr) {
    return Internal("SSL_CTX_new: " + TakeSslErrors());
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(),
                      SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                  SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_alpn_select_cb(ctx.get(), SelectProtocol, nullptr);
  FERRY_RETURN_IF_ERROR(LoadChain(ctx.get(), material.cert_chain_pem));
  FERRY_RETURN_IF_ERROR(LoadKey(ctx.get(), material.key_pem));
  if (!material.client_ca_pem.empty()) {
    FERRY_RETURN_IF_ERROR(LoadClientCa(ctx.get(), material.client_ca_pem));
  }
  return ctx;
}

void SetListenerProtocol(SSL* ssl, const char* alpn) {
  SSL_set_app_data(ssl, const_cast<char*>(alpn));
}

std::string PeerSubject(SSL* ssl) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    return {};
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253) < 0) {
    return {};
  }
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

}  // namespace ferry::net
