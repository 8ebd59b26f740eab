// One hook host process (ferry-hookhost), from its command line's values to its exit code.
// Start-up: node file, segment (its own object read-write, the workers' and the supervisor's
// read-only), the repository's manifests and plugins, then the sandbox ([hooks] sandbox),
// then the request flow's threads and the KServe front end; *ready* in its status slot. It
// then follows its control ring (stop, drain) until told to stop or drained.
//
// Thread safety: called once, from the process's main thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ferry::hookhost {

struct HookHostProcessArgs {
  std::string segment;  // The shared-memory segment (ferry-NODE).
  uint32_t slot = 0;    // This hook host's slot in it.
  std::string config;   // The node file.
  int http_fd = -1;     // Inherited listening sockets (set by ferryd); -1: no front end.
  int grpc_fd = -1;
  // The inherited region socket to ferryd's broker (system shared memory); -1: none.
  int region_fd = -1;
  std::optional<std::string> models;  // The node's model table (--models), names or '-'.
  // Models whose plugin ferryd marked failed (--failed-plugins, comma-separated): refused.
  std::optional<std::string> failed_plugins;
};

// Runs the hook host; does not return: it leaves with _exit (no exit handlers: a stuck plugin
// call may still run). Exit codes: 0 after stop or drain; 1 when it cannot start; 3 when its
// plugin calls ran past their limit (restart it; the snapshot's fault_model names whose).
[[noreturn]] void RunHookHostProcess(const HookHostProcessArgs& args);

}  // namespace ferry::hookhost
