// The node file (e.g. /etc/ferry/node.toml): everything ferryd needs to start a node.
// ParseNodeConfig validates all of it and reports every error at once; a config with any
// error is never returned, so nothing starts on a bad file.
//
// Thread safety: plain data and pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/scheduler_config.h"
#include "config/tenant_config.h"

namespace ferry {

// Which devices get a worker: [node] devices = "all" | [0, 2] | "cpu:N".
// The shared-memory segment holds at most this many workers and hook hosts (shm/layout.h
// kMaxPerKind: a sleeper waits on one futex word per peer, and futex_waitv takes 128).
inline constexpr int64_t kMaxWorkers = 126;
inline constexpr int64_t kMaxHookhosts = 126;

struct DeviceSelection {
  enum class Kind { kAllGpus, kGpuList, kCpu };
  Kind kind = Kind::kAllGpus;
  std::vector<int64_t> gpu_ids;  // kGpuList: 1 to kMaxWorkers distinct ids in [0, 1023].
  int64_t cpu_workers = 0;       // kCpu: N in [1, kMaxWorkers] CPU workers (no GPU needed).
};

// What executes models: the devices' own backend (CUDA for GPU ids, the CPU executor for
// cpu:N), or the cost-model simulator for load tests of the whole node without a GPU.
enum class BackendKind { kAuto, kSim };

struct ListenAddress {
  std::string host;
  uint16_t port = 0;  // 0 = any free port (tests).
  std::string ToString() const { return host + ":" + std::to_string(port); }
};

// [node.listen] tls_cert, tls_key, tls_client_ca: PEM files (relative to the node file), read
// by ferryd at start and on reload. With them, the HTTP and gRPC ports speak TLS only.
struct TlsSettings {
  std::string cert;       // The server certificate, then its intermediates.
  std::string key;        // Its private key: unencrypted PEM, mode 0600 or stricter.
  std::string client_ca;  // Empty: no client certificate asked; else mutual TLS.
  bool enabled() const { return !cert.empty(); }
  bool operator==(const TlsSettings&) const = default;
};

struct NodeSettings {
  // Names the node in logs and metrics and derives the shared-memory segment name.
  // Letters, digits, '-', '_' only. Default "ferry".
  std::string name = "ferry";
  DeviceSelection devices;
  // "auto" (default): CUDA on GPU ids, the CPU executor for cpu:N. "sim": every worker runs
  // SimBackend with the [sim] costs (one worker per selected device).
  BackendKind backend = BackendKind::kAuto;
  // Number of sandboxed hook-host processes serving the front end. [1, kMaxHookhosts].
  // Default 2.
  int64_t hookhosts = 2;
  // KServe v2 over HTTP, gRPC, and Prometheus /metrics. Defaults 0.0.0.0:8000/8001/8002.
  ListenAddress http{"0.0.0.0", 8000};
  ListenAddress grpc{"0.0.0.0", 8001};
  ListenAddress metrics{"0.0.0.0", 8002};
  // TLS on the HTTP and gRPC listeners (docs/security.md, "TLS"); empty `cert`: none.
  TlsSettings tls;
  // HAProxy's agent check: the node's state and weight for a balancer (shm/node_load.h), one
  // line per connection. Absent (default): no agent listener.
  std::optional<ListenAddress> agent;
  // Directory of model bundles, one sub-directory per model. A relative path is taken
  // relative to the node file's directory. Default /var/lib/ferry/models.
  std::string model_repository = "/var/lib/ferry/models";
  // Bytes of the node's shared-memory segment (request tensors in flight). An integer or a
  // string with a unit ("512MiB", "2GiB"). 1 MiB to 1 TiB. Default 1 GiB.
  uint64_t shm_size = uint64_t{1} << 30;
};
inline constexpr uint64_t kMaxShmSize = uint64_t{1} << 40;  // 1 TiB.

enum class GatewayMode {
  kRoundRobin,        // Next eligible worker in turn.
  kLeastOutstanding,  // The eligible worker with the fewest requests in flight.
  kLptPacking,        // Longest-processing-time-first packing by learned cost.
};
std::string_view GatewayModeName(GatewayMode m);

struct GatewaySettings {
  // How a hook host picks among eligible workers. Default least_outstanding.
  GatewayMode mode = GatewayMode::kLeastOutstanding;
  // A worker whose heartbeat has not advanced for this long is stalled: it gets requests only
  // when no other worker can take them, and those it holds unanswered are sent again to one
  // that can. Workers beat every 100 ms at rest and on every dispatch turn. 20..60000.
  // Default 250.
  int64_t stall_ms = 250;
};

enum class SandboxMode { kStrict, kOff };

struct HookSettings {
  // strict (default): hook hosts run plugins under seccomp, no new privileges, no network
  // but their inherited sockets. off: for debugging plugins only.
  SandboxMode sandbox = SandboxMode::kStrict;
  // Threads per hook host running pre/postprocess. 1..1024. Default 4.
  int64_t threads = 4;
  // A plugin call running longer fails its request (DEADLINE_EXCEEDED), and its hook host
  // drains and is restarted (which stops the call). 1..600000. Default 1000.
  int64_t call_timeout_ms = 1000;
  // A model whose plugin calls ran past call_timeout_ms this many times is marked failed by
  // ferryd: its requests are refused until it is unloaded and loaded again. 1..1000.
  // Default 3.
  int64_t max_plugin_faults = 3;
  // Requests a hook host holds at once (validating, waiting for ring space, at a worker,
  // post-processing); beyond it new ones get RESOURCE_EXHAUSTED. 1..2^20. Default 4096.
  int64_t max_pending = 4096;
  // How long the transport thread polls for the answer of the only request pending before it
  // sleeps (microseconds): at light load the answer is caught without a wake-up. 0..10000;
  // 0 never polls. Absent (-1): 200 where the hook host may run on 4 or more CPUs, else 0.
  int64_t spin_us = -1;
  // Private memory a hook host may add once its manifests are read: its plugins (loading,
  // create() and every call), the front end's buffers, its threads' stacks. Past it an
  // allocation fails (a plugin's malloc returns NULL; the host itself exits and is restarted,
  // the workers unaffected). RLIMIT_DATA over what is mapped then. 64MiB..1TiB. Default 8GiB.
  uint64_t max_memory = uint64_t{8} << 30;
};

// CPU workers (devices = "cpu:N").
struct CpuSettings {
  // Intra-op threads per CPU worker. 0 (default): the CPUs of the worker's share (its affinity
  // mask once pinned). 0..1024.
  int64_t threads = 0;
  // Pin CPU worker i of N to the i-th of N near-equal groups of the node's CPUs, so workers
  // never compete for cores. Default true.
  bool pin = true;
};

// Every worker ([worker]).
struct WorkerSettings {
  // Bytes of model weights a worker keeps resident at once; models past it are loaded at
  // their dispatch and evicted by their residency floor (docs/scheduler.md, Residency).
  // 0 (default): no budget on CPU workers (every model stays resident); on a GPU worker the
  // device's free memory at start. 1MiB..1TiB.
  uint64_t weight_budget = 0;
  // What a cold load evicts. "lru" (default): least recently used on_demand models, then
  // warm ones, only as many as its room needs. "all": every non-pinned model on every miss,
  // the naive policy benchmarks compare against (bench/many_models.sh).
  enum class Eviction { kLru, kAll };
  Eviction eviction = Eviction::kLru;
  // At most this fraction of a worker's time goes to cold loads: after a load of L seconds
  // the next starts no sooner than L (1 - f) / f later. On a CPU worker loads take the same
  // cores as execution, so this bounds what they take from resident models (and how fast
  // models that do not fit are cycled through). (0, 1]. Default 0.25.
  double max_load_fraction = 0.25;
  // With nothing in flight or queued after its work, how long (microseconds) the dispatch loop
  // polls its rings before it sleeps, so that a request following at once finds it awake.
  // 0..10000; 0 never polls; -1 (absent): PollMicros's default (common/poll.h).
  int64_t spin_us = -1;
};

// SimBackend's cost model ([node] backend = "sim"): a dispatch at compiled size s takes
// fixed_us + per_row_us * s microseconds.
struct SimModelCost {
  double fixed_us = 500;   // >= 0. Default 500.
  double per_row_us = 50;  // >= 0. Default 50.
};
struct SimSettings {
  SimModelCost fallback;                       // [sim] fixed_us, per_row_us.
  std::map<std::string, SimModelCost> models;  // [sim.models.NAME] overrides.
};

// ferryd: its control socket and how it restarts and stops the node's processes.
struct SupervisorSettings {
  // The control socket ferryctl talks to (mode 0660). Default /run/ferry/control.sock
  // (systemd's RuntimeDirectory=ferry).
  std::string control_socket = "/run/ferry/control.sock";
  // Group owning the control socket; its members may control the node. Empty (default):
  // ferryd's own group. Root and ferryd's own user are always allowed.
  std::string control_group;
  // First delay before restarting a process that died; doubles per consecutive death up to
  // restart_backoff_max_ms. 1..600000 and 1..3600000. Defaults 100 and 30000.
  int64_t restart_backoff_ms = 100;
  int64_t restart_backoff_max_ms = 30'000;
  // More deaths than this within crash_loop_window_seconds: the process is crash-looping and
  // the node reports degraded (ferryd keeps restarting it at the longest backoff).
  // 1..1000 and 1..86400. Defaults 5 and 60.
  int64_t crash_loop_restarts = 5;
  int64_t crash_loop_window_seconds = 60;
  // SIGTERM or `ferryctl drain`: how long queued work may take to finish before the children
  // are stopped. 0..3600. Default 30.
  double drain_timeout_seconds = 30;
  // Before the drain: the node keeps serving this long while its agent check answers
  // "drain", so a balancer ([node.listen] agent) stops sending it new connections before it
  // stops accepting them. 0..600. Default 0 (no balancer to tell).
  double drain_notice_seconds = 0;
  // A child not ready this long after its start (loading models, warm-up) is killed and
  // restarted. 1..86400. Default 600.
  double start_timeout_seconds = 600;
};

// Tenants a node file may declare; shared memory sizes its per-tenant counters by it
// (shm::kMaxTenants, checked where both are seen).
inline constexpr size_t kMaxTenants = 16;

// The KServe front end in every hook host ([frontend]).
struct FrontendSettings {
  // Largest request body in bytes (JSON and binary tensors together); larger gets 413.
  // 1024..2^34. Default 64 MiB.
  uint64_t max_request_bytes = 64 << 20;
  // Connections each hook host holds, HTTP and gRPC each; more are closed at once (HTTP
  // answers 503 first). 1..65536. Default 1024.
  int64_t max_connections = 1024;
  // Calls at once on one gRPC connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS); a client
  // opening more waits for one to end. 1..65536. Default 100 (HTTP/2's suggested minimum).
  int64_t max_streams_per_connection = 100;
  // A compressed request body may inflate to at most this many times its size (once past
  // 1 MiB), so a compression bomb is refused after a bounded amount of work. 0: no limit.
  // 0..1000000. Default 100 (JSON of real numbers compresses 3-5 times; a bomb 1000).
  int64_t max_inflate_ratio = 100;
  // A request must arrive whole within this (slow clients get 408). 0.1..3600. Default 30.
  double request_timeout_seconds = 30;
  // An idle keep-alive connection (HTTP), or one with no call (gRPC), is closed after this.
  // 0.1..86400. Default 60.
  double idle_timeout_seconds = 60;
  // The tenants a request may name (the "tenant" parameter or the Ferry-Tenant header /
  // metadata); another name is refused (400), so clients cannot grow the metrics' label
  // sets. At most 16 names, each as a model name. Default none: naming a tenant is refused.
  std::vector<std::string> tenants;
  // The repository extension's load and unload (HTTP and gRPC): refused (403) unless true;
  // under [auth] required only an admin tenant may. Default false.
  bool model_control = false;
  // The system shared-memory extension (Triton's; docs/frontend.md "Shared memory"): clients
  // on this host may register shared-memory objects for tensors. Off (registration refused,
  // 403) unless true: ferryd opens the objects clients name. Default false.
  bool system_shared_memory = false;
};

// [trace]: where the trace extension's spans go and the settings the node starts with
// (docs/frontend.md, "Tracing"; a client changes the settings live).
struct TraceConfig {
  // The OTLP/HTTP collector: "http://HOST:PORT[/PATH]" (PATH default /v1/traces). Empty
  // (default): no tracing, and the extension's changes are refused.
  std::string otlp_endpoint;
  bool timestamps = false;  // level: "off" (default) or "timestamps".
  int64_t rate = 1000;      // One request in `rate` per hook host. 1..16777215.
  int64_t count = -1;       // Traces before tracing stops; -1: no limit. -1..67108862.
};

struct NodeConfig {
  NodeSettings node;
  FrontendSettings frontend;
  SupervisorSettings supervisor;
  CpuSettings cpu;
  WorkerSettings worker;
  SimSettings sim;
  SchedulerConfig scheduler;
  GatewaySettings gateway;
  HookSettings hooks;
  // [tenants.NAME] (config/tenant_config.h): each also named in frontend.tenants, whose order
  // numbers the node's tenants.
  std::vector<TenantSettings> tenants;
  AuthSettings auth;
  TraceConfig trace;
};

using Environment = std::map<std::string, std::string>;

// The process environment's FERRY_SCHEDULER_* variables.
Environment SchedulerEnvironment();

// Parses and validates a node file's text. `source` names it in errors; `base_dir` resolves a
// relative model_repository; `env` supplies FERRY_SCHEDULER_* overrides (an unknown one is an
// error too). Returns INVALID_ARGUMENT listing every error, one per line.
// "HOST:PORT" as [node.listen] takes it: an IPv4 address, a DNS name or a bracketed IPv6
// address (returned without its brackets), a port in [0, 65535]. INVALID_ARGUMENT otherwise.
Result<ListenAddress> ParseListenAddress(const std::string& text);

Result<NodeConfig> ParseNodeConfig(std::string_view text, const std::string& source,
                                   const std::string& base_dir, const Environment& env);

// Reads and parses a node file from disk.
Result<NodeConfig> LoadNodeConfig(const std::string& path, const Environment& env);

// Parses "1073741824", "512MiB", "2GiB", "64KiB", "1G" (powers of 1024).
Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace ferry
