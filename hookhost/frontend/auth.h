// Who is calling: the API key a request carries (HTTP `Authorization: Bearer KEY`, gRPC
// `authorization` metadata), checked against the node's key digests (shm/key_table.h,
// written by ferryd from the [tenants.NAME] keys files), and what the key's tenant may call
// (config/tenant_config.h). docs/security.md has the rules and the threat model.
//
//   kAdmin     under auth, only a tenant whose [tenants.NAME] admin = true (else
//              PERMISSION_DENIED); without auth, anyone, as Triton
//   a client certificate (mutual TLS) whose subject a tenant's tls_subjects lists, and no
//              key: that tenant, its models checked as for a key
//   no key     auth not required: anonymous (tenant 0), as without tenants
//              required: served only on the endpoint classes [auth] open_endpoints names,
//              else UNAUTHENTICATED
//   a key      not "Bearer KEY" or no digest matches: UNAUTHENTICATED (whatever `required`
//              says: a client sending a wrong key learns it); else the key's tenant, and a
//              model outside its `models` is PERMISSION_DENIED (on an open endpoint too,
//              except for the open classes' model-less answers)
//
// A key is compared as its SHA-256 digest against every digest in the table with
// CRYPTO_memcmp, with no early exit: the time taken depends on the key's length and the
// table's size, never on how much of a stored digest it matches.
//
// Thread safety: Check and MaySee may be called from any thread (the table snapshot is
// cached under a mutex and replaced when ferryd publishes new keys).
// Lifetime: the key table (the segment) outlives the Authenticator.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/node_config.h"
#include "shm/key_table.h"

namespace ferry::frontend {

enum class Endpoint {
  kHealth,      // kOpenHealth
  kMetadata,    // kOpenMetadata
  kStatistics,  // kOpenStatistics
  kInfer,       // never open under auth
  kAdmin,       // changing the node (logging): under auth, only a tenant with admin = true
};

class Authenticator {
 public:
  // `config`: the node file's [auth], [tenants.NAME] and frontend.tenants (which number them).
  Authenticator(const shm::KeyTableData* table, const NodeConfig& config);

  // `authorization`: the header's or metadata's value, nullptr when absent. `model`: the
  // model the call is about (empty for node-wide endpoints). Returns the caller's tenant
  // number (0: anonymous), or UNAUTHENTICATED / PERMISSION_DENIED with a message that never
  // repeats the key.
  // `tls_subject`: the connection's verified client certificate subject (empty: none); with
  // no key, a subject some [tenants.NAME] tls_subjects lists is that tenant.
  Result<uint32_t> Check(const std::string* authorization, std::string_view tls_subject,
                         Endpoint endpoint, std::string_view model) const;
  // Whether `tenant` (0: anonymous) sees `model` in node-wide listings (index, statistics).
  bool MaySee(uint32_t tenant, std::string_view model) const;
  // The tenant's name; empty for 0 or an unknown number.
  std::string TenantName(uint32_t tenant) const;

 private:
  // Check without the admin rule.
  Result<uint32_t> Identify(const std::string* authorization, std::string_view tls_subject,
                            Endpoint endpoint, std::string_view model) const;
  // The key's tenant; 0 when no digest matches.
  uint32_t TenantOfKey(std::string_view key) const;
  std::shared_ptr<const shm::KeySnapshot> Keys() const;
  bool Open(Endpoint endpoint) const;

  const shm::KeyTableData* table_;
  AuthSettings auth_;
  std::vector<std::string> names_;                // Tenant number - 1 -> name.
  std::vector<const TenantSettings*> by_number_;  // Tenant number - 1 -> settings (or null).
  std::vector<TenantSettings> tenants_;
  std::map<std::string, uint32_t, std::less<>> by_subject_;  // tls_subjects -> tenant number.
  mutable std::mutex mu_;
  mutable std::shared_ptr<const shm::KeySnapshot> keys_;
};

// SHA-256 of `data` (OpenSSL).
KeyDigest Sha256(std::string_view data);

}  // namespace ferry::frontend
