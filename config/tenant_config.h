// [tenants.NAME] and [auth] of the node file: which models each tenant may call and the file
// of its API keys' digests, and whether a request must carry a key (docs/security.md).
//
//   [auth]
//   required = true                  # no valid key: 401 / UNAUTHENTICATED. Default false.
//   open_endpoints = ["health"]      # served without a key: health, metadata, statistics
//   [tenants.acme]
//   models = ["mlp", "cnn"]          # or ["*"]: every model
//   keys_file = "keys/acme.keys"     # relative to the node file; lines "sha256:HEX"
//   weight = 2.0                     # share of GPU time between tenants (fair). Default 1.
//   tls_subjects = ["CN=acme-batch,O=Acme"]  # client certificates that are this tenant
//   admin = true                     # may change node settings (the logging extension)
//   max_queued = 64                  # requests in flight across the node (429 beyond)
//   rate = 100                       # requests/s across the node, bursts of `burst` (429)
//
// A [tenants.NAME] table also declares NAME as a tenant, as [frontend] tenants does.
//
// Thread safety: plain data and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/scheduler_config.h"
#include "config/toml_reader.h"

namespace ferry {

struct TenantSettings {
  std::string name;
  std::vector<std::string> models;  // Model names, or the single entry "*": every model.
  std::string keys_file;            // Absolute; empty: this tenant has no keys.
  double weight = 1.0;              // fair's tenant level (docs/scheduler.md, "Tenants").
  // Client certificate subjects (RFC 2253, "CN=alice,O=Acme") that are this tenant over mutual
  // TLS ([node.listen] tls_client_ca); each names one tenant.
  std::vector<std::string> tls_subjects;
  // Node-wide limits (hookhost/tenant_limits.h): requests admitted and not yet answered
  // (0: none), and a token bucket of `rate` requests/s holding up to `burst` (rate 0: none).
  bool admin = false;  // May change the node's settings (logging) when auth is required.
  int64_t max_queued = 0;
  double rate = 0;
  double burst = 0;  // Default: max(1, rate), one second's worth.
  bool MayCall(std::string_view model) const;
};

// Endpoint classes [auth] open_endpoints may name. Inference is never open under auth.
enum OpenEndpoint : uint32_t {
  kOpenHealth = 1,      // /v2/health/*, model readiness, /v2/ferry/load (gRPC: ServerLive, ...)
  kOpenMetadata = 2,    // server and model metadata, model config, the repository index
  kOpenStatistics = 4,  // the statistics extension
};

struct AuthSettings {
  bool required = false;
  uint32_t open_endpoints = kOpenHealth;  // OpenEndpoint bits.
};

// Reads [tenants] (every entry a table) into `tenants`, in name order; relative keys_file
// paths are resolved against `base_dir`.
void ReadTenants(TableReader& r, const std::string& base_dir, std::vector<TenantSettings>* tenants);
void ReadAuth(TableReader& r, AuthSettings* auth);
// [priorities.NAME] tables: `level` (1..3, each named once) and `max_wait_ms` (> 0, optional)
// into `scheduler`'s priority_names and max_wait_seconds.
void ReadPriorities(TableReader& r, SchedulerConfig* scheduler);

// The SHA-256 digest of an API key.
using KeyDigest = std::array<uint8_t, 32>;
inline constexpr size_t kMaxKeysPerFile = 4096;
inline constexpr size_t kMaxKeysFileBytes = 1 << 20;

// A keys file: one "sha256:" and 64 hex digits per line (any case); blank lines and lines
// starting with '#' are skipped. Refused (INVALID_ARGUMENT naming the path and line, never
// the line's text, which may be a key pasted by mistake): a file that is not a regular file
// (a FIFO, a device, a symbolic link), readable or writable by group or others (mode & 077),
// over kMaxKeysFileBytes or kMaxKeysPerFile keys, or with any other line.
Result<std::vector<KeyDigest>> ReadKeysFile(const std::string& path);

}  // namespace ferry
