// ferry-worker: one per GPU (or CPU worker); the dispatch loop over the node's shared-memory
// rings (worker/worker_process.h). Started by ferryd; runnable by hand and from tests:
//   ferry-worker --segment ferry-NODE --slot N --config /etc/ferry/node.toml
// Exit codes: 0 stopped or drained; 1 could not start; 3 backend unhealthy (restart it).
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/cli.h"
#include "worker/worker_process.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-worker: one GPU's (or CPU worker's) dispatch loop; started by ferryd"};
  ferry::worker::WorkerProcessArgs args;
  app.add_option("--segment", args.segment, "shared-memory segment name (ferry-<node name>)")
      ->required();
  app.add_option("--slot", args.slot, "this worker's slot in the segment")->required();
  app.add_option("--config", args.config, "the node file")->required();
  app.add_flag("--device-pinned", args.device_pinned,
               "CUDA_VISIBLE_DEVICES holds only this worker's GPU: use device 0 (set by ferryd)");
  app.add_option("--models", args.models,
                 "the node's model table, by index: names, '-' for an unloaded one (set by ferryd; "
                 "default: the repository's bundles in name order)");
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto status = ferry::ApplyLogFlags("ferry-worker", log_flags); !status.ok()) {
    std::cerr << status.error().ToString() << "\n";
    return 1;
  }
  return ferry::worker::RunWorkerProcess(args);
}
