// Certificates for TLS tests, made with OpenSSL's API at run time (no files checked in, no
// openssl command needed): a CA, a server certificate it signs for 127.0.0.1 and localhost,
// and client certificates with a chosen common name. EC P-256 keys, valid for a day.
//
// Thread safety: pure functions.
#pragma once

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace ferry::testing {

struct TestIdentity {
  std::string cert_pem;
  std::string key_pem;
  std::shared_ptr<EVP_PKEY> key;
  std::shared_ptr<X509> cert;
};

inline std::string ToPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

inline std::string ToPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

inline void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// `issuer` null: self-signed (a CA). `kind`: "ca", "server" or "client".
inline TestIdentity MakeIdentity(const std::string& common_name, const TestIdentity* issuer,
                                 const std::string& kind, long serial = 1) {
  TestIdentity id;
  id.key.reset(EVP_EC_gen("P-256"), EVP_PKEY_free);
  id.cert.reset(X509_new(), X509_free);
  X509* cert = id.cert.get();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, id.key.get());
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("ferry tests"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : cert;
  X509_set_issuer_name(cert, X509_get_subject_name(issuer_cert));
  if (kind == "ca") {
    AddExtension(cert, issuer_cert, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert, issuer_cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert, issuer_cert, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert, issuer_cert, NID_ext_key_usage,
                 kind == "server" ? "serverAuth" : "clientAuth");
    if (kind == "server") {
      AddExtension(cert, issuer_cert, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
    }
  }
  EVP_PKEY* signer = issuer != nullptr ? issuer->key.get() : id.key.get();
  X509_sign(cert, signer, EVP_sha256());
  id.cert_pem = ToPem(cert);
  id.key_pem = ToPem(id.key.get());
  return id;
}

// A CA with a server certificate and two clients ("alice", "bob"), all signed by it.
struct TestPki {
  TestIdentity ca = MakeIdentity("ferry test CA", nullptr, "ca");
  TestIdentity server = MakeIdentity("localhost", &ca, "server", 2);
  TestIdentity alice = MakeIdentity("alice", &ca, "client", 3);
  TestIdentity bob = MakeIdentity("bob", &ca, "client", 4);
};

}  // namespace ferry::testing
