// ferryd's core: starts the node's processes on a fresh segment, keeps them running, answers
// the control socket, talks to systemd, and stops the node cleanly.
//
// Start: the segment (a stale one from a killed predecessor is removed first), the listening
// sockets (HTTP, gRPC, metrics: bound from [node.listen], or taken from systemd socket
// activation by name), /metrics on its own thread (metrics.h), the control socket, then one
// ferry-hookhost per [node] hookhosts (given the HTTP and gRPC sockets as descriptors 3 and 4)
// and one ferry-worker per device (child_process.h: nothing else inherited, dies with
// ferryd). A worker on a GPU sees only that GPU (CUDA_VISIBLE_DEVICES, PCI bus order) and is
// told so (--device-pinned).
//
// Watch (every kTickNs; kRestTickNs while the node is settled): a child that exits is reaped
// through its pidfd, its slot repaired (shm::ResetSlot: its peers fail what they had in flight with
// it, UNAVAILABLE, and nothing of its shared memory stays allocated) and a successor started after
// the restart policy's backoff (restart_policy.h). A child whose heartbeat stops advancing for
// scheduler.dispatch_timeout_seconds once ready (a hung GPU, a SIGSTOP), or that is not ready
// supervisor.start_timeout_seconds after its start, is killed, then restarted the same way.
//
// Ready when every child reports ready; then READY=1 to systemd, STATUS= lines as the node
// changes, WATCHDOG=1 only while every running child's heartbeat advances.
//
// Stop (SIGTERM, SIGINT, `ferryctl drain`): hook hosts drain first (they take no new request
// and answer every one they hold), then workers drain (queued work finishes); after
// supervisor.drain_timeout_seconds whatever is left is stopped (queued requests fail
// UNAVAILABLE), then killed 5 s later; the segment is removed; Run returns 0.
//
// Reload (SIGHUP, `ferryctl reload`): the node file is read again; on any error the node keeps
// its configuration and the reply and log say why. The scheduler's discipline and
// max_queue_depth, and every model's weight and max_batch_size, apply live on every worker;
// every other change is named as needing a restart of ferryd. Live changes (by reload, or
// set_policy / set_discipline on the control socket) are re-applied to a worker that restarts.
//
// Thread safety: one thread (the one that calls Run; children's PDEATHSIG follows it), plus
// the /metrics thread, which reads only shared memory and atomic counters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/node_config.h"

namespace ferry::supervisor {

inline constexpr int64_t kTickNs = 20'000'000;
// The tick while every child is ready and nothing is in progress (no control client, no
// restart or model-table change): a pidfd, signal or control connection still wakes it at once.
inline constexpr int64_t kRestTickNs = 100'000'000;
// A repository load or unload asked through a hook host is answered within this, done or not.
inline constexpr int64_t kRepositoryWaitNs = 300'000'000'000;

struct SupervisorOptions {
  std::string config_path;
  std::string worker_binary;                // ferry-worker.
  std::string hookhost_binary;              // ferry-hookhost.
  std::string gpu_dir;                      // Where GPUs are listed (devices.h).
  std::vector<std::string> child_log_args;  // --log-format/--log-level passed on.
};

class Supervisor {
 public:
  // Validates what the node needs before anything starts: devices, binaries, the control
  // socket. The segment and children are created by Run.
  static Result<std::unique_ptr<Supervisor>> Create(SupervisorOptions options, NodeConfig config);
  ~Supervisor();

  // Runs the node until it is stopped. 0 after a clean stop; 1 when it could not start.
  int Run();

 private:
  struct Impl;
  explicit Supervisor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::supervisor
