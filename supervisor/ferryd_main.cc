// ferryd: the node supervisor started by systemd (supervisor/supervisor.h; docs/supervisor.md).
//   ferryd --config /etc/ferry/node.toml          run the node
//   ferryd --check --config /etc/ferry/node.toml  validate the node file (and devices) and exit
// Exit codes: 0 after a clean stop (or a valid --check); 1 when the node could not start;
// 2 for an invalid node file or command line (every error printed, nothing started).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "common/cli.h"
#include "config/node_config.h"
#include "supervisor/api_keys.h"
#include "supervisor/devices.h"
#include "supervisor/supervisor.h"
#include "supervisor/tls_files.h"

namespace {

// A child binary: the flag's path; else beside ferryd, in ../libexec/ferry (installed), or
// where this build tree put it.
std::string FindBinary(const std::string& flag, const char* name, const char* build_path) {
  if (!flag.empty()) {
    return flag;
  }
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (const std::filesystem::path& candidate :
       {self / name, self / ".." / "libexec" / "ferry" / name}) {
    if (!ec && access(candidate.c_str(), X_OK) == 0) {
      return candidate.lexically_normal().string();
    }
  }
  return build_path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferryd: the ferry node supervisor (forks workers and hook hosts)"};
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  std::string config_path = "/etc/ferry/node.toml";
  bool check_only = false;
  std::string worker_binary;
  std::string hookhost_binary;
  std::string gpu_dir = ferry::supervisor::kNvidiaGpuDir;
  app.add_option("--config", config_path, "node file")->capture_default_str();
  app.add_flag("--check", check_only, "validate the node file and its devices, then exit");
  app.add_option("--worker-binary", worker_binary, "ferry-worker to start (default: found)");
  app.add_option("--hookhost-binary", hookhost_binary, "ferry-hookhost to start");
  app.add_option("--gpu-dir", gpu_dir, "where the NVIDIA driver lists GPUs")->capture_default_str();
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
  for (const std::string& warning : config->scheduler.deprecations) {
    spdlog::warn("{}", warning);
  }
  ferry::Result<std::vector<ferry::supervisor::WorkerDevice>> devices =
      ferry::supervisor::ResolveDevices(config->node, gpu_dir);
  if (!devices.ok()) {
    spdlog::error("refusing to start: {}", devices.error().message);
    return 2;
  }
  // The keys files too, so that --check catches one others may read before a start does.
  if (auto keys = ferry::supervisor::CollectKeys(*config); !keys.ok()) {
    spdlog::error("refusing to start: {}", keys.error().message);
    return 2;
  }
  // And the TLS files: a key others may read, or one that does not match its certificate.
  if (config->node.tls.enabled()) {
    if (auto tls = ferry::supervisor::ReadTlsFiles(config->node.tls); !tls.ok()) {
      spdlog::error("refusing to start: {}", tls.error().message);
      return 2;
    }
  }
  spdlog::info("node file {} is valid (node '{}', {} worker(s), {} hook host(s))", config_path,
               config->node.name, devices->size(), config->node.hookhosts);
  if (check_only) {
    return 0;
  }
  ferry::supervisor::SupervisorOptions options;
  options.config_path = std::filesystem::absolute(config_path).string();
  options.worker_binary = FindBinary(worker_binary, "ferry-worker", FERRY_BUILD_WORKER);
  options.hookhost_binary = FindBinary(hookhost_binary, "ferry-hookhost", FERRY_BUILD_HOOKHOST);
  options.gpu_dir = gpu_dir;
  options.child_log_args = {"--log-format", log_flags.format, "--log-level", log_flags.level};
  auto supervisor = ferry::supervisor::Supervisor::Create(options, std::move(*config));
  if (!supervisor.ok()) {
    spdlog::error("cannot start the node: {}", supervisor.error().ToString());
    return 1;
  }
  return (*supervisor)->Run();
}
