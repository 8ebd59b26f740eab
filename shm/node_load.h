// A node's load as a balancer sees it (issue "Beyond one host"): whether it can serve, and a
// weight from the work its workers hold. ferryd answers HAProxy's agent check with it
// ([node.listen] agent) and the hook hosts serve it as JSON at /v2/ferry/load, both from the
// workers' status snapshots.
//
//   state   "down" when no worker is ready; "drain" while the node drains; else "up".
//   weight  100 x (1 - outstanding / (ready workers x kFullOutstanding)), at least 1: an idle
//           node 100, one whose workers hold kFullOutstanding requests each (queued or
//           executing) 1. HAProxy scales the server's configured weight by it.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shm/status.h"

namespace ferry::shm {

// Requests in flight per worker at which a node's weight bottoms out.
inline constexpr uint64_t kFullOutstanding = 64;

struct WorkerLoad {
  uint32_t index = 0;
  bool ready = false;
  uint64_t outstanding = 0;  // Queued or executing, over its models.
  uint64_t queued = 0;
};

struct NodeLoad {
  std::string state;  // "up", "drain" or "down".
  int weight = 0;     // 1..100; 0 when down.
  std::vector<WorkerLoad> workers;
};

// A worker's load from its last consistent snapshot (null: none could be read, not ready).
// Borrowed, not copied: a snapshot is tens of kilobytes.
WorkerLoad LoadOfWorker(uint32_t index, const StatusSnapshotData* snapshot);
NodeLoad ComputeNodeLoad(std::vector<WorkerLoad> workers, bool draining);
// HAProxy's agent-check answer: "up 73%\n", "drain\n" or "down\n".
std::string AgentReply(const NodeLoad& load);

}  // namespace ferry::shm
