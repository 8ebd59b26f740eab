#include "shm/node_load.h"

#include <algorithm>

namespace ferry::shm {

WorkerLoad LoadOfWorker(uint32_t index, const StatusSnapshotData* snapshot) {
  WorkerLoad load;
  load.index = index;
  if (!snapshot || snapshot->state != static_cast<uint32_t>(ProcessState::kReady)) {
    return load;
  }
  load.ready = true;
  uint32_t listed = std::min<uint32_t>(snapshot->num_models, kMaxStatusModels);
  for (uint32_t m = 0; m < listed; ++m) {
    load.outstanding += snapshot->models[m].outstanding;
    load.queued += snapshot->models[m].queue_depth;
  }
  return load;
}

NodeLoad ComputeNodeLoad(std::vector<WorkerLoad> workers, bool draining) {
  NodeLoad load;
  uint64_t ready = 0;
  uint64_t outstanding = 0;
  for (const WorkerLoad& w : workers) {
    if (w.ready) {
      ++ready;
      outstanding += w.outstanding;
    }
  }
  load.workers = std::move(workers);
  if (ready == 0) {
    load.state = "down";
    return load;
  }
  load.state = draining ? "drain" : "up";
  uint64_t full = ready * kFullOutstanding;
  uint64_t held = std::min(outstanding, full);
  load.weight = std::max(1, static_cast<int>(100 - (100 * held) / full));
  return load;
}

std::string AgentReply(const NodeLoad& load) {
  if (load.state != "up") {
    return load.state + "\n";
  }
  return "up " + std::to_string(load.weight) + "%\n";
}

}  // namespace ferry::shm
