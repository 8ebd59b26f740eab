// One worker process (ferry-worker), from its command line's values to its exit code:
// node file, segment, the node's model table, the backend (CPU, sim, or the CUDA module for a
// GPU), each model built on it, the scheduler warmed up, then the dispatch loop
// (worker/dispatch_loop.h) until it is stopped or drained.
//
// Thread safety: called once, from the process's main thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ferry::worker {

struct WorkerProcessArgs {
  std::string segment;  // The shared-memory segment (ferry-NODE).
  uint32_t slot = 0;    // This worker's slot in it.
  std::string config;   // The node file.
  // CUDA_VISIBLE_DEVICES holds only this worker's GPU: it is device 0 (set by ferryd).
  bool device_pinned = false;
  std::optional<std::string> models;  // The node's model table (--models), names or '-'.
};

// Exit codes: 0 stopped or drained; 1 could not start; 3 backend unhealthy (restart it).
int RunWorkerProcess(const WorkerProcessArgs& args);

}  // namespace ferry::worker
