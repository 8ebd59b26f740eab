// The supervisor's inner state (Supervisor::Impl) and its children, shared by the files that
// implement it: supervisor.cc (start, the event loop, shutdown, readiness and systemd),
// children.cc (starting, watching and killing worker and hook host processes), reload.cc
// (the model table: reload, load, unload and hook host refreshes) and node_control.cc (the
// control socket's commands and the status reply). Internal: included by those files only.
//
// Threads: Impl is touched only by ferryd's event-loop thread, except `counters` and the
// shared-memory segment, which the /metrics thread reads.
#pragma once

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/trace_settings.h"
#include "model/bundle.h"
#include "model/repository.h"
#include "net/http_server.h"
#include "shm/control.h"
#include "shm/node_load.h"
#include "shm/recovery.h"
#include "shm/repository_mailbox.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "shm/status.h"
#include "shm/trace_store.h"
#include "supervisor/child_process.h"
#include "supervisor/control_server.h"
#include "supervisor/devices.h"
#include "supervisor/listeners.h"
#include "supervisor/log_relay.h"
#include "supervisor/metrics.h"
#include "supervisor/node_report.h"
#include "supervisor/region_broker.h"
#include "supervisor/restart_policy.h"
#include "supervisor/supervisor.h"
#include "supervisor/tls_files.h"
#include "supervisor/trace_exporter.h"

namespace ferry::supervisor {

using nlohmann::json;

inline constexpr int64_t kKillGraceNs = 5'000'000'000;

inline constexpr int64_t kStatusPeriodNs = 1'000'000'000;

inline constexpr uint32_t kRingCapacity = 1024;

inline constexpr uint64_t kSignalTag = uint64_t{1} << 40;

inline constexpr uint64_t kControlTag = uint64_t{2} << 40;
inline constexpr uint64_t kAgentTag = uint64_t{3} << 40;
// An epoll tag for child i's log relay: kLogTag | i.
inline constexpr uint64_t kLogTag = uint64_t{4} << 40;

// kAnnouncingDrain: the node still serves while its agent check answers "drain", so that a
// balancer stops sending it new connections before it stops accepting them
// ([supervisor] drain_notice_seconds; skipped when 0).
enum class Phase {
  kRunning,
  kAnnouncingDrain,
  kDrainingHookhosts,
  kDrainingWorkers,
  kStopping,
  kDone
};

struct Child {
  Child(bool is_worker, uint32_t i, uint32_t s, WorkerDevice d, const SupervisorSettings& settings)
      : worker(is_worker), index(i), slot(s), device(std::move(d)), policy(settings) {}

  bool worker = false;
  uint32_t index = 0;  // Among its kind.
  uint32_t slot = 0;
  WorkerDevice device;
  ChildProcess process;
  RestartPolicy policy;
  bool waiting = false;   // Dead, its successor due at restart_at.
  bool finished = false;  // Exited during shutdown: not restarted.
  int64_t started_ns = 0;
  int64_t restart_at = 0;
  uint64_t restarts = 0;
  std::string last_exit;
  std::string kill_reason;  // Why ferryd killed it, for the log line of its exit.
  uint64_t heartbeat = 0;
  int64_t heartbeat_ns = 0;
  std::optional<shm::StatusSnapshotData> status;  // Last consistent read.
  bool ready_seen = false;  // This incarnation reported ready (live overrides re-applied).
  // A hook host drained to pick up a new model table: restarted at once when it exits, not
  // counted as a death.
  bool refreshing = false;
  int64_t refresh_since = 0;
  // A hook host's stdout and stderr, relayed into ferryd's log (log_relay.h); open until the
  // pipe ends, which may be after the process is reaped.
  std::optional<LogRelay> log;

  std::string Name() const {
    return (worker ? "worker " : "hook host ") + std::to_string(index) + " (slot " +
           std::to_string(slot) + ")";
  }
  bool running() const { return process.pid > 0; }
  shm::ProcessState state() const {
    return status ? static_cast<shm::ProcessState>(status->state) : shm::ProcessState::kStarting;
  }
  bool ready() const { return running() && state() == shm::ProcessState::kReady; }
};

// "running", "draining hook hosts", ...: for logs and the status reply.
std::string_view PhaseName(Phase p);

struct Supervisor::Impl {
  SupervisorOptions options;
  NodeConfig config;
  std::vector<WorkerDevice> devices;
  std::optional<shm::Segment> segment;
  std::optional<shm::TlsStore> tls;  // [node.listen] tls_*: the hook hosts' certificate.
  // [trace] otlp_endpoint (traces.cc): a store per hook host, the exporter, and the node's
  // settings with the figures trace_count is counted from.
  std::vector<shm::TraceStore> trace_stores;
  std::unique_ptr<TraceExporter> exporter;
  std::vector<uint64_t> trace_asked_seen;  // Per hook host: the last change taken.
  TraceSettings trace_node;
  uint32_t trace_sequence = 0;
  int64_t trace_count_base = -1;             // trace_count as last set (-1: no limit).
  std::vector<uint64_t> trace_sampled_base;  // Per hook host: `sampled` when it was set.
  uint64_t trace_spans_refused = 0;          // Spans that failed SpanLooksSane (traces.cc).
  Status StartTraces();
  // Changes asked of hook hosts, trace_count, and the spans to the exporter: every tick.
  void PumpTraces();
  void RemoveTraces();
  // Publishes trace_node, its count charged from each host's `sampled` at `sampled[h]`.
  void PublishTraceSettings(const std::vector<uint64_t>& sampled);
  // Each hook host's `sampled` now; the requests sampled since trace_sampled_base (each
  // host's clamped: its count may lie).
  std::vector<uint64_t> TracesSampledNow() const;
  uint64_t TracesSampledSince(const std::vector<uint64_t>& now) const;
  std::optional<ControlServer> control;
  // The system shared-memory extension's registry and the hook hosts' region sockets.
  std::unique_ptr<RegionBroker> regions;
  std::optional<Listener> http;  // Handed to every hook host; closed when the node stops.
  std::string bound_http;
  std::optional<Listener> grpc;  // Likewise, for gRPC.
  std::string bound_grpc;
  // /metrics: its own thread, reading only shared memory and `counters`.
  std::optional<Listener> metrics_listener;
  std::optional<Listener> agent_listener;  // [node.listen] agent, when set.
  std::unique_ptr<SupervisorCounters> counters;
  std::unique_ptr<net::HttpServer> metrics_server;
  std::thread metrics_thread;
  std::vector<Child> children;
  int epoll_fd = -1;
  int signal_fd = -1;
  Phase phase = Phase::kRunning;
  int64_t drain_deadline = 0;
  int64_t notice_deadline = 0;  // When Phase::kAnnouncingDrain ends.
  int64_t kill_deadline = 0;
  bool notified_ready = false;
  std::string last_status_line;
  int64_t last_status_ns = 0;
  uint64_t watchdog_usec = 0;
  int64_t last_watchdog_ns = 0;
  uint64_t control_sequence = 1;
  // Live changes made since start, re-applied to a worker that restarts.
  std::optional<Discipline> discipline_override;
  std::map<std::string, double> weight_overrides;
  std::map<std::string, std::optional<int64_t>> batch_overrides;  // nullopt: uncapped.
  std::optional<int64_t> queue_depth_override;
  std::map<uint32_t, double> tenant_weight_overrides;  // By tenant number.
  // The node's model table, by index: a model name, or "-" for an unloaded one. Children get
  // it at every start (--models); workers follow loads and unloads live, hook hosts (which
  // cannot open bundles inside their sandbox) are restarted one at a time.
  std::vector<std::string> model_table;
  // Plugin faults: per model, how many hook host restarts its plugin calls caused
  // (HookSettings::max_plugin_faults); the models marked failed for it, with why. Hook hosts
  // started later refuse those (--failed-plugins). Cleared when the model is unloaded.
  std::map<std::string, int64_t> plugin_faults;
  std::map<std::string, std::string> failed_plugins;
  std::deque<size_t> refresh_queue;       // Hook hosts (child indices) due for a restart.
  std::optional<size_t> refresh_current;  // The one restarting now.
  // Unloads announced (their models answer not ready) and carried out at `at`.
  struct PendingUnload {
    uint32_t index;
    std::string name;
    int64_t at;
  };
  std::vector<PendingUnload> pending_unloads;

  ~Impl() {
    StopMetrics();
    if (signal_fd >= 0) {
      close(signal_fd);
    }
    if (epoll_fd >= 0) {
      close(epoll_fd);
    }
  }

  Status Start();
  Status StartMetrics();
  void StopMetrics();
  void Loop();
  void StartChild(Child& c, int64_t now);
  void OnExit(Child& c, int64_t now);
  // A hook host's output relay, its write end set as `spec`'s output (log_relay.h).
  void OpenLogRelay(Child& c, ChildSpec* spec, int64_t now);
  // Relays what child `c` wrote; closes the relay once its pipe has ended.
  void PumpLog(Child& c, int64_t now);
  // A hook host that turned unhealthy naming a model whose plugin call ran past its limit
  // (StatusSnapshotData::fault_model): counted against that model, marked failed at
  // max_plugin_faults.
  void CountPluginFault(const Child& c);
  void Tick(int64_t now);
  void Watch(Child& c, int64_t now);
  void Kill(Child& c, const std::string& why);
  bool SendControl(const Child& c, const shm::ControlMessage& message);
  // A tenant's fair-share weight to every running worker, kept for workers that restart.
  // NOT_FOUND for a tenant the node does not declare. Returns {"workers": sent}.
  Result<json> SetTenantWeight(const std::string& tenant, double weight);
  void ReapplyOverrides(const Child& c);
  void BeginShutdown(const std::string& why, int64_t now);
  // The drain proper: the listening sockets closed, the hook hosts told to drain.
  void DrainHookhosts(int64_t now);
  void AdvanceShutdown(int64_t now);
  void Notify(int64_t now);
  bool NodeReady() const;
  bool Degraded(int64_t now) const;
  Result<json> Handle(const control::ControlRequest& request);
  Result<json> Reload();
  // Reload's keys: the keys files read again and published when they changed (unless the
  // tenants changed, which waits for a restart). On error nothing is published.
  Status ReloadKeys(const NodeConfig& loaded, json* applied);
  // Reads the TLS files again and publishes them when they changed: new connections get the
  // new certificate. An error refuses the reload (the node keeps serving the old one).
  Status ReloadTls(const NodeConfig& loaded, json* applied);
  // Per-model weights, batch caps and residency floors that changed, sent to each model key
  // (a model's entry to each version without its own) and taken into `config`.
  void ReloadModelSettings(const SchedulerConfig& loaded, json* applied);
  // Log settings a client asked a hook host for (logging extension) become the node's: kept
  // in the segment for processes that start later, applied here, sent to every child.
  void PropagateLogSettings();
  std::vector<uint64_t> log_requests_seen;  // Per hook host: the last request taken.
  Result<json> SendToModel(const std::string& model, shm::ControlCode code, double weight,
                           int32_t value);
  // ferryctl load: ApplyModel, refused when it changes nothing.
  Result<json> LoadModel(const std::string& name);
  // `name` as its repository directory serves it now (a model name: the bundle, or the
  // versions its policy selects, others of its versions unloaded; "NAME/V": that version):
  // each key not in the table loaded. {"indices": its keys' indices, "changed": ...}.
  Result<json> ApplyModel(const std::string& name);
  size_t LoadKey(const std::string& key);  // Appended to the table; workers told.
  // A model name unloads all its versions; "NAME/V" one. With [supervisor]
  // drain_notice_seconds, each first answers not ready for that long (a balancer stops
  // sending it here) while it still serves; then it is unloaded.
  Result<json> UnloadModel(const std::string& name);
  bool Unloading(uint32_t index) const;  // Announced, not yet carried out.
  // Unloads these indices (each in the table, none Unloading) as UnloadModel does.
  json UnloadIndices(const std::string& name, const std::vector<uint32_t>& indices);
  size_t CompleteUnload(uint32_t index, const std::string& name);  // Workers told.
  void FinishUnloads(int64_t now);  // The pending unloads whose notice has passed.
  // Sends a model table change to every running worker; one whose control ring is full is
  // killed (its successor starts with the new table) rather than left numbering differently.
  size_t SendTableChange(const shm::ControlMessage& message);
  void QueueHookhostRefresh();
  // Restarts the hook hosts queued, one at a time; the one whose repository change is not
  // answered yet waits (HeldForRepositoryAnswer).
  void RefreshHookhosts(int64_t now);
  // The repository extension (repository_requests.cc): requests taken from the hook hosts'
  // mailboxes, one change at a time, answered when done or after kRepositoryWaitNs.
  struct RepositoryChange {
    uint32_t hookhost;  // Which asked: its index among hook hosts.
    uint32_t sequence;
    shm::RepositoryOp op;
    std::string model;
    std::vector<uint32_t> indices;  // A load's: the indices of the keys it serves.
    int64_t max_batch_size;         // A load's cap, set once the model is ready (0: none).
    int64_t deadline;
  };
  std::optional<RepositoryChange> repository_change;
  std::vector<uint64_t> repository_seen;  // Per hook host: the last request word taken.
  void TakeRepositoryRequests(int64_t now);
  void AnswerRepositoryChange(int64_t now);
  // nullopt while the change is under way; else how it ended.
  std::optional<Status> RepositoryChangeOutcome() const;
  // The same for one key of a load: ready on a worker, or failed on every one.
  std::optional<Status> LoadOutcome(uint32_t index) const;
  // A key of `model` (its name or itself) is announced to be unloaded.
  bool Leaving(const std::string& model) const;
  std::optional<size_t> HookhostChild(uint32_t hookhost) const;  // Its index in `children`.
  uint32_t IndexOf(const std::string& model) const;              // In model_table. REQUIRES: there.
  bool HeldForRepositoryAnswer(size_t child) const;
  // How long the loop may sleep: kTickNs, or up to kRestTickNs while the node is settled.
  int64_t TickNs() const;
  json StatusJson() const;
  // The node's load from the workers' last snapshots (shm/node_load.h).
  shm::NodeLoad Load() const;
  // Takes `socket` as the agent listener, non-blocking, watched by the loop (kAgentTag).
  void WatchAgent(Listener socket);
  // Answers every agent check waiting on the agent listener, one line each, and closes them.
  void AnswerAgentChecks();
  // The models whose plugin was marked failed: [{model, reason}].
  json FailedPluginsJson() const;
};

}  // namespace ferry::supervisor
