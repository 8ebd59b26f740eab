// ferry-hookhost: one sandboxed hook host (hookhost/hookhost_process.h). Started by ferryd;
// runnable by hand and from tests:
//   ferry-hookhost --segment ferry-NODE --slot N --config /etc/ferry/node.toml
// Exit codes: 0 after stop or drain; 1 when it cannot start; 3 when a plugin call ran past its
// time limit (restart it).
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/cli.h"
#include "hookhost/hookhost_process.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-hookhost: sandboxed hook plugin host and front end; started by ferryd"};
  ferry::hookhost::HookHostProcessArgs args;
  app.add_option("--segment", args.segment, "shared-memory segment name (ferry-<node name>)")
      ->required();
  app.add_option("--slot", args.slot, "this hook host's slot in the segment")->required();
  app.add_option("--config", args.config, "the node file")->required();
  app.add_option("--http-fd", args.http_fd,
                 "an inherited listening socket to serve KServe v2 HTTP on (set by ferryd)");
  app.add_option("--region-fd", args.region_fd,
                 "an inherited socket to ferryd's shared-memory region broker (set by ferryd)");
  app.add_option("--grpc-fd", args.grpc_fd,
                 "an inherited listening socket to serve KServe v2 gRPC on (with --http-fd)");
  app.add_option("--models", args.models,
                 "the node's model table, by index: names, '-' for an unloaded one (set by ferryd; "
                 "default: the repository's bundles in name order)");
  app.add_option("--failed-plugins", args.failed_plugins,
                 "models whose plugin ran past its time limit too often, comma-separated: "
                 "refused (set by ferryd)");
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  CLI11_PARSE(app, argc, argv);
  if (auto status = ferry::ApplyLogFlags("ferry-hookhost", log_flags); !status.ok()) {
    std::cerr << status.error().ToString() << "\n";
    return 1;
  }
  ferry::hookhost::RunHookHostProcess(args);
}
