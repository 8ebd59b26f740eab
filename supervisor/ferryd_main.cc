// ferryd: the node supervisor started by systemd (see DESIGN.md, Processes).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/cli.h"
#include "config/node_config.h"

int main(int argc, char** argv) {
  CLI::App app{"ferryd: the ferry node supervisor (forks workers and hook hosts)"};
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  std::string config_path = "/etc/ferry/node.toml";
  bool check_only = false;
  app.add_option("--config", config_path, "node file")->capture_default_str();
  app.add_flag("--check", check_only, "validate the node file and exit");
  CLI11_PARSE(app, argc, argv);
  if (auto status = ferry::ApplyLogFlags("ferryd", log_flags); !status.ok()) {
    std::cerr << status.error().message << "\n";
    return 2;
  }
  ferry::Result<ferry::NodeConfig> config =
      ferry::LoadNodeConfig(config_path, ferry::SchedulerEnvironment());
  if (!config.ok()) {
    spdlog::error("refusing to start on an invalid node file:\n{}", config.error().message);
    return 2;
  }
  spdlog::info("node file {} is valid (node '{}')", config_path, config->node.name);
  for (const std::string& warning : config->scheduler.deprecations) {
    spdlog::warn("{}", warning);
  }
  if (check_only) {
    return 0;
  }
  spdlog::error("process supervision is not built yet; use --check to validate a node file");
  return 1;
}
