// ferryctl: controls a running ferry node (through ferryd's control socket), and validates
// node files and bundles offline. Exit codes: 0 success; 1 ferryd refused or could not be
// reached (the reason on stderr); 2 a bad command line or invalid files.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <thread>

#include "common/cli.h"
#include "control/control_client.h"
#include "ctl/haproxy_config.h"
#include "ctl/import.h"
#include "ctl/infer.h"
#include "ctl/tables.h"
#include "ctl/validate.h"

namespace {

using ferry::control::Command;
using ferry::control::ControlRequest;

ferry::control::ControlRequest Plain(ferry::control::Command command) {
  ferry::control::ControlRequest request;
  request.command = command;
  return request;
}

std::string DefaultSocket() {
  const char* env = std::getenv("FERRY_CONTROL_SOCKET");
  return env != nullptr && *env != '\0' ? env : "/run/ferry/control.sock";
}

// Sends `request` and prints the reply: a table by default, the JSON with --json.
int Call(const std::string& socket, const ferry::control::ControlRequest& request, bool json,
         std::string (*table)(const nlohmann::json&)) {
  ferry::Result<nlohmann::json> reply = ferry::control::CallFerryd(socket, request);
  if (!reply.ok()) {
    std::cerr << "ferryctl: " << reply.error().ToString() << "\n";
    return 1;
  }
  if (json || table == nullptr) {
    std::cout << reply->dump(2) << "\n";
  } else {
    std::cout << table(*reply);
  }
  return 0;
}

// After load / unload: waits until the node is ready again with every hook host restarted and
// every worker serving each key of `present` and no longer listing any of `absent`. 0 when
// so; 1 when a worker failed to load one (its error printed) or after two minutes.
int WaitForModels(const std::string& socket, const std::vector<std::string>& present,
                  const std::vector<std::string>& absent) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    ferry::Result<nlohmann::json> status =
        ferry::control::CallFerryd(socket, Plain(ferry::control::Command::kStatus));
    if (!status.ok()) {
      std::cerr << "ferryctl: " << status.error().ToString() << "\n";
      return 1;
    }
    bool settled = status->value("ready", false) && !status->value("models_changing", true);
    for (const nlohmann::json& child : status->value("children", nlohmann::json::array())) {
      if (child.value("kind", "") != "worker") {
        continue;
      }
      size_t listed = 0;
      for (const nlohmann::json& m : child.value("models", nlohmann::json::array())) {
        std::string key = m.value("model", "");
        if (std::find(absent.begin(), absent.end(), key) != absent.end()) {
          settled = false;
        }
        if (std::find(present.begin(), present.end(), key) == present.end()) {
          continue;
        }
        ++listed;
        if (m.value("state", "") == "failed") {
          std::cerr << "ferryctl: worker " << child.value("index", 0) << " failed to load '" << key
                    << "': " << m.value("error", "") << "\n";
          return 1;
        }
      }
      settled = settled && listed == present.size();
    }
    if (settled) {
      std::cout << "the node is ready\n";
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "ferryctl: the node did not settle within 2 minutes (see ferryctl status)\n";
  return 1;
}

// The command line: global flags, and one action per subcommand, run for the one parsed.
// Each subcommand's values live in the lambda that registers it (shared with its action).
struct Cli {
  CLI::App app{"ferryctl: control a ferry node and validate its configuration"};
  ferry::LogFlags log_flags;
  std::string socket = DefaultSocket();
  bool json = false;
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;

  void Add(CLI::App* command, std::function<int()> action) {
    actions.emplace_back(command, std::move(action));
  }
  // A command that sends one request with no arguments and prints its reply.
  void AddPlain(const char* name, const char* help, Command command,
                std::string (*table)(const nlohmann::json&)) {
    Add(app.add_subcommand(name, help),
        [this, command, table] { return Call(socket, Plain(command), json, table); });
  }
};

void AddOffline(Cli& cli) {
  auto paths = std::make_shared<std::vector<std::string>>();
  CLI::App* validate = cli.app.add_subcommand(
      "validate",
      "Check node files and model bundle directories; exit 0 when all are valid, 2 "
      "otherwise");
  validate->add_option("PATH", *paths, "node .toml files and bundle directories")->required();
  cli.Add(validate, [paths] {
    return ferry::RunValidate(*paths, ferry::SchedulerEnvironment(), std::cout, std::cerr);
  });
  auto import_command = std::make_shared<ferry::ctl::ImportCommand>();
  CLI::App* import = cli.app.add_subcommand(
      "import", "Convert an ONNX model into a bundle a node serves; exit 2 if it cannot");
  import->add_option("MODEL", import_command->onnx_path, "the .onnx file")->required();
  import->add_option("--out", import_command->out_dir, "the new bundle directory (REPO/NAME)")
      ->required();
  import->add_option("--name", import_command->name, "the model's name (the directory's)");
  import->add_option("--sizes", import_command->sizes, "compiled batch sizes, ascending")
      ->delimiter(',')
      ->capture_default_str();
  cli.Add(import, [import_command] {
    return ferry::ctl::RunImport(*import_command, std::cout, std::cerr);
  });
  auto haproxy = std::make_shared<ferry::ctl::HaproxyCommand>();
  CLI::App* haproxy_config = cli.app.add_subcommand(
      "haproxy-config", "Write an HAProxy configuration for several nodes (docs/operations.md)");
  haproxy_config
      ->add_option("--node", haproxy->nodes, "HOST:HTTP_PORT:GRPC_PORT:AGENT_PORT; one per node")
      ->required();
  haproxy_config->add_option("--bind-http", haproxy->bind_http, "HAProxy's HTTP HOST:PORT")
      ->capture_default_str();
  haproxy_config->add_option("--bind-grpc", haproxy->bind_grpc, "HAProxy's gRPC HOST:PORT")
      ->capture_default_str();
  haproxy_config
      ->add_option("--models", haproxy->models,
                   "models with a backend each (default: those the nodes report ready)")
      ->delimiter(',');
  haproxy_config
      ->add_option("--runtime-socket", haproxy->runtime_socket, "HAProxy's runtime API socket")
      ->capture_default_str();
  haproxy_config
      ->add_option("--maxconn", haproxy->maxconn,
                   "HAProxy's connection limit (it needs twice as many descriptors)")
      ->capture_default_str();
  cli.Add(haproxy_config,
          [haproxy] { return ferry::ctl::RunHaproxyConfig(*haproxy, std::cout, std::cerr); });
}

void AddSettings(Cli& cli) {
  auto request = std::make_shared<ControlRequest>();
  CLI::App* set_policy = cli.app.add_subcommand("set-policy", "Set a model's fair-share weight");
  set_policy->add_option("MODEL", request->model)->required();
  set_policy->add_option("--weight", request->weight, "> 0")->required();
  cli.Add(set_policy, [&cli, request] {
    request->command = Command::kSetPolicy;
    return Call(cli.socket, *request, cli.json, nullptr);
  });
  CLI::App* set_tenant =
      cli.app.add_subcommand("set-tenant", "Set a tenant's fair-share weight (between tenants)");
  set_tenant->add_option("TENANT", request->tenant)->required();
  set_tenant->add_option("--weight", request->weight, "> 0")->required();
  cli.Add(set_tenant, [&cli, request] {
    request->command = Command::kSetTenant;
    return Call(cli.socket, *request, cli.json, nullptr);
  });
  auto level = std::make_shared<std::string>();
  CLI::App* set_residency = cli.app.add_subcommand(
      "set-residency", "Move a model's weights (scheduler.residency_mode = external)");
  set_residency->add_option("MODEL", request->model)->required();
  set_residency->add_option("LEVEL", *level, "pinned, warm or on_demand")
      ->required()
      ->check(CLI::IsMember({"pinned", "warm", "on_demand"}));
  cli.Add(set_residency, [&cli, request, level] {
    request->command = Command::kSetResidency;
    request->residency = *level == "pinned" ? ferry::Residency::kPinned
                         : *level == "warm" ? ferry::Residency::kWarm
                                            : ferry::Residency::kOnDemand;
    return Call(cli.socket, *request, cli.json, nullptr);
  });
  auto discipline = std::make_shared<std::string>();
  CLI::App* set_discipline = cli.app.add_subcommand("set-discipline", "fair, fifo or edf");
  set_discipline->add_option("DISCIPLINE", *discipline)
      ->required()
      ->check(CLI::IsMember({"fair", "fifo", "edf"}));
  cli.Add(set_discipline, [&cli, request, discipline] {
    request->command = Command::kSetDiscipline;
    request->discipline = *discipline == "fair"   ? ferry::Discipline::kFair
                          : *discipline == "fifo" ? ferry::Discipline::kFifo
                                                  : ferry::Discipline::kEdf;
    return Call(cli.socket, *request, cli.json, nullptr);
  });
}

void AddModelChanges(Cli& cli) {
  for (bool loading : {true, false}) {
    auto model = std::make_shared<std::string>();
    auto no_wait = std::make_shared<bool>(false);
    CLI::App* command =
        loading ? cli.app.add_subcommand("load",
                                         "Load a bundle of the model repository on the running "
                                         "node (workers keep running)")
                : cli.app.add_subcommand(
                      "unload", "Unload a model: new requests are refused, queued ones still run");
    command->add_option("MODEL", *model, loading ? "the bundle's directory name" : "")->required();
    command->add_flag("--no-wait", *no_wait, "return once ferryd accepted it");
    cli.Add(command, [&cli, loading, model, no_wait] {
      ControlRequest change;
      change.command = loading ? Command::kLoad : Command::kUnload;
      change.model = *model;
      ferry::Result<nlohmann::json> reply = ferry::control::CallFerryd(cli.socket, change);
      if (!reply.ok()) {
        std::cerr << "ferryctl: " << reply.error().ToString() << "\n";
        return 1;
      }
      std::cout << reply->dump(2) << "\n";
      // A load names the keys it loaded and unloaded (a model's versions), an unload its keys.
      auto keys = [&](const char* field) {
        return reply->value(field, std::vector<std::string>());
      };
      return *no_wait  ? 0
             : loading ? WaitForModels(cli.socket, keys("loaded"), keys("unloaded"))
                       : WaitForModels(cli.socket, {}, keys("keys"));
    });
  }
}

// Per-model rates between two scheduler-metrics replies, refreshed every `interval`.
int RunTop(const std::string& socket, double interval, int iterations) {
  ferry::Result<nlohmann::json> before =
      ferry::control::CallFerryd(socket, Plain(Command::kSchedulerMetrics));
  for (int i = 0; before.ok() && (iterations == 0 || i < iterations); ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    ferry::Result<nlohmann::json> after =
        ferry::control::CallFerryd(socket, Plain(Command::kSchedulerMetrics));
    if (!after.ok()) {
      before = after;
      break;
    }
    if (isatty(1)) {
      std::cout << "\x1b[H\x1b[2J";
    }
    std::cout << ferry::ctl::FormatTop(*before, *after, interval) << std::flush;
    before = after;
  }
  if (!before.ok()) {
    std::cerr << "ferryctl: " << before.error().ToString() << "\n";
    return 1;
  }
  return 0;
}

void AddClients(Cli& cli) {
  auto interval = std::make_shared<double>(1.0);
  auto iterations = std::make_shared<int>(0);
  CLI::App* top = cli.app.add_subcommand("top", "Per-model rates, batch sizes and GPU shares");
  top->add_option("--interval", *interval, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_option("--iterations", *iterations, "stop after N refreshes (0: until interrupted)");
  cli.Add(top, [&cli, interval, iterations] { return RunTop(cli.socket, *interval, *iterations); });

  auto options = std::make_shared<ferry::ctl::InferOptions>();
  CLI::App* infer = cli.app.add_subcommand(
      "infer", "Send one request to the node over HTTP; inputs from .npy files");
  infer->add_option("MODEL", options->model)->required();
  infer
      ->add_option("--input", options->inputs,
                   "FILE.npy (the model's first input) or NAME=FILE.npy; repeat for more")
      ->required();
  infer->add_option("--deadline-ms", options->deadline_ms, "the request's deadline");
  infer->add_option("--url", options->url, "HOST:PORT (default: ferryd's HTTP address)");
  infer->add_option("--output-dir", options->output_dir, "write each output as NAME.npy");
  cli.Add(infer, [&cli, options] {
    options->socket = cli.socket;
    options->json = cli.json;
    return ferry::ctl::RunInfer(*options, std::cout, std::cerr);
  });
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  cli.app.require_subcommand(1);
  ferry::AddLogFlags(cli.app, &cli.log_flags);
  cli.app.add_option("--socket", cli.socket, "ferryd's control socket (env FERRY_CONTROL_SOCKET)")
      ->capture_default_str();
  cli.app.add_flag("--json", cli.json, "print ferryd's reply as JSON (for scripts)");
  AddOffline(cli);
  cli.AddPlain("status", "The node's processes and models", Command::kStatus,
               ferry::ctl::FormatStatus);
  cli.AddPlain("metrics", "Every scheduler counter, per worker and model",
               Command::kSchedulerMetrics, ferry::ctl::FormatMetrics);
  cli.AddPlain("control-status", "Discipline, weights, residency, per worker",
               Command::kControlStatus, ferry::ctl::FormatControlStatus);
  cli.AddPlain("tenants", "Per tenant: weight, served and refused, compute time and share",
               Command::kTenants, ferry::ctl::FormatTenants);
  AddSettings(cli);
  cli.AddPlain("compact", "Compact every worker's weight arena", Command::kCompact, nullptr);
  cli.AddPlain("reload", "Re-read the node file; apply what can change live", Command::kReload,
               nullptr);
  cli.AddPlain("drain", "Stop the node: finish queued work, then stop every process",
               Command::kDrain, nullptr);
  AddModelChanges(cli);
  AddClients(cli);
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = cli.app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (auto s = ferry::ApplyLogFlags("ferryctl", cli.log_flags); !s.ok()) {
    std::cerr << s.error().message << "\n";
    return 2;
  }
  for (auto& [command, action] : cli.actions) {
    if (command->parsed()) {
      return action();
    }
  }
  return 2;
}
