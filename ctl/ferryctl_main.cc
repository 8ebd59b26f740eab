// ferryctl: controls a running ferry node (through ferryd's control socket), and validates
// node files and bundles offline. Exit codes: 0 success; 1 ferryd refused or could not be
// reached (the reason on stderr); 2 a bad command line or invalid files.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "common/cli.h"
#include "control/control_client.h"
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
// every worker serving `model` (loaded) or no longer listing it (unloaded). 0 when so; 1 when
// a worker failed to load it (its error printed) or after two minutes.
int WaitForModel(const std::string& socket, const std::string& model, bool loaded) {
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
      bool listed = false;
      for (const nlohmann::json& m : child.value("models", nlohmann::json::array())) {
        if (m.value("model", "") != model) {
          continue;
        }
        listed = true;
        if (loaded && m.value("state", "") == "failed") {
          std::cerr << "ferryctl: worker " << child.value("index", 0) << " failed to load '"
                    << model << "': " << m.value("error", "") << "\n";
          return 1;
        }
      }
      settled = settled && listed == loaded;
    }
    if (settled) {
      std::cout << "model '" << model << "' " << (loaded ? "loaded" : "unloaded")
                << "; the node is ready\n";
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::cerr << "ferryctl: the node did not settle within 2 minutes (see ferryctl status)\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferryctl: control a ferry node and validate its configuration"};
  app.require_subcommand(1);
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  std::string socket = DefaultSocket();
  bool json = false;
  app.add_option("--socket", socket, "ferryd's control socket (env FERRY_CONTROL_SOCKET)")
      ->capture_default_str();
  app.add_flag("--json", json, "print ferryd's reply as JSON (for scripts)");

  std::vector<std::string> paths;
  CLI::App* validate = app.add_subcommand("validate",
                                          "Check node files and model bundle directories; exit 0 "
                                          "when all are valid, 2 otherwise");
  validate->add_option("PATH", paths, "node .toml files and bundle directories")->required();

  ferry::ctl::ImportCommand import_command;
  CLI::App* import = app.add_subcommand(
      "import", "Convert an ONNX model into a bundle a node serves; exit 2 if it cannot");
  import->add_option("MODEL", import_command.onnx_path, "the .onnx file")->required();
  import->add_option("--out", import_command.out_dir, "the new bundle directory (REPO/NAME)")
      ->required();
  import->add_option("--name", import_command.name, "the model's name (the directory's)");
  import->add_option("--sizes", import_command.sizes, "compiled batch sizes, ascending")
      ->delimiter(',')
      ->capture_default_str();

  CLI::App* status = app.add_subcommand("status", "The node's processes and models");
  CLI::App* metrics =
      app.add_subcommand("metrics", "Every scheduler counter, per worker and model");
  CLI::App* control_status =
      app.add_subcommand("control-status", "Discipline, weights, residency, per worker");
  ferry::control::ControlRequest request;
  CLI::App* set_policy = app.add_subcommand("set-policy", "Set a model's fair-share weight");
  set_policy->add_option("MODEL", request.model)->required();
  set_policy->add_option("--weight", request.weight, "> 0")->required();
  std::string level;
  CLI::App* set_residency = app.add_subcommand(
      "set-residency", "Move a model's weights (scheduler.residency_mode = external)");
  set_residency->add_option("MODEL", request.model)->required();
  set_residency->add_option("LEVEL", level, "pinned, warm or on_demand")
      ->required()
      ->check(CLI::IsMember({"pinned", "warm", "on_demand"}));
  std::string discipline;
  CLI::App* set_discipline = app.add_subcommand("set-discipline", "fair, fifo or edf");
  set_discipline->add_option("DISCIPLINE", discipline)
      ->required()
      ->check(CLI::IsMember({"fair", "fifo", "edf"}));
  CLI::App* compact = app.add_subcommand("compact", "Compact every worker's weight arena");
  CLI::App* reload =
      app.add_subcommand("reload", "Re-read the node file; apply what can change live");
  CLI::App* drain =
      app.add_subcommand("drain", "Stop the node: finish queued work, then stop every process");
  std::string model_name;
  bool no_wait = false;
  CLI::App* load = app.add_subcommand(
      "load", "Load a bundle of the model repository on the running node (workers keep running)");
  load->add_option("MODEL", model_name, "the bundle's directory name")->required();
  load->add_flag("--no-wait", no_wait, "return once ferryd accepted it");
  CLI::App* unload = app.add_subcommand(
      "unload", "Unload a model: new requests are refused, queued ones still run");
  unload->add_option("MODEL", model_name)->required();
  unload->add_flag("--no-wait", no_wait, "return once ferryd accepted it");
  double interval = 1.0;
  int iterations = 0;
  CLI::App* top = app.add_subcommand("top", "Per-model rates, batch sizes and GPU shares");
  top->add_option("--interval", interval, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_option("--iterations", iterations, "stop after N refreshes (0: until interrupted)");

  ferry::ctl::InferOptions infer_options;
  CLI::App* infer =
      app.add_subcommand("infer", "Send one request to the node over HTTP; inputs from .npy files");
  infer->add_option("MODEL", infer_options.model)->required();
  infer
      ->add_option("--input", infer_options.inputs,
                   "FILE.npy (the model's first input) or NAME=FILE.npy; repeat for more")
      ->required();
  infer->add_option("--deadline-ms", infer_options.deadline_ms, "the request's deadline");
  infer->add_option("--url", infer_options.url, "HOST:PORT (default: ferryd's HTTP address)");
  infer->add_option("--output-dir", infer_options.output_dir, "write each output as NAME.npy");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (auto s = ferry::ApplyLogFlags("ferryctl", log_flags); !s.ok()) {
    std::cerr << s.error().message << "\n";
    return 2;
  }
  if (validate->parsed()) {
    return ferry::RunValidate(paths, ferry::SchedulerEnvironment(), std::cout, std::cerr);
  }
  if (import->parsed()) {
    return ferry::ctl::RunImport(import_command, std::cout, std::cerr);
  }
  if (status->parsed()) {
    return Call(socket, Plain(ferry::control::Command::kStatus), json, ferry::ctl::FormatStatus);
  }
  if (metrics->parsed()) {
    return Call(socket, Plain(ferry::control::Command::kSchedulerMetrics), json,
                ferry::ctl::FormatMetrics);
  }
  if (control_status->parsed()) {
    return Call(socket, Plain(ferry::control::Command::kControlStatus), json,
                ferry::ctl::FormatControlStatus);
  }
  if (set_policy->parsed()) {
    request.command = ferry::control::Command::kSetPolicy;
    return Call(socket, request, json, nullptr);
  }
  if (set_residency->parsed()) {
    request.command = ferry::control::Command::kSetResidency;
    request.residency = level == "pinned" ? ferry::Residency::kPinned
                        : level == "warm" ? ferry::Residency::kWarm
                                          : ferry::Residency::kOnDemand;
    return Call(socket, request, json, nullptr);
  }
  if (set_discipline->parsed()) {
    request.command = ferry::control::Command::kSetDiscipline;
    request.discipline = discipline == "fair"   ? ferry::Discipline::kFair
                         : discipline == "fifo" ? ferry::Discipline::kFifo
                                                : ferry::Discipline::kEdf;
    return Call(socket, request, json, nullptr);
  }
  if (compact->parsed()) {
    return Call(socket, Plain(ferry::control::Command::kCompact), json, nullptr);
  }
  if (reload->parsed()) {
    return Call(socket, Plain(ferry::control::Command::kReload), json, nullptr);
  }
  if (drain->parsed()) {
    return Call(socket, Plain(ferry::control::Command::kDrain), json, nullptr);
  }
  if (load->parsed() || unload->parsed()) {
    ferry::control::ControlRequest change;
    change.command =
        load->parsed() ? ferry::control::Command::kLoad : ferry::control::Command::kUnload;
    change.model = model_name;
    int code = Call(socket, change, json, nullptr);
    if (code != 0 || no_wait) {
      return code;
    }
    return WaitForModel(socket, model_name, load->parsed());
  }
  if (infer->parsed()) {
    infer_options.socket = socket;
    infer_options.json = json;
    return ferry::ctl::RunInfer(infer_options, std::cout, std::cerr);
  }
  if (top->parsed()) {
    ferry::Result<nlohmann::json> before =
        ferry::control::CallFerryd(socket, Plain(ferry::control::Command::kSchedulerMetrics));
    for (int i = 0; before.ok() && (iterations == 0 || i < iterations); ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(interval));
      ferry::Result<nlohmann::json> after =
          ferry::control::CallFerryd(socket, Plain(ferry::control::Command::kSchedulerMetrics));
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
  return 2;
}
