// ferryctl: controls a running ferry node, and validates node files and bundles offline.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/cli.h"
#include "ctl/validate.h"

int main(int argc, char** argv) {
  CLI::App app{"ferryctl: control a ferry node and validate its configuration"};
  app.require_subcommand(1);
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);

  std::vector<std::string> paths;
  CLI::App* validate = app.add_subcommand("validate",
                                          "Check node files and model bundle directories; exit 0 "
                                          "when all are valid, 2 otherwise");
  validate->add_option("PATH", paths, "node .toml files and bundle directories")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (auto status = ferry::ApplyLogFlags("ferryctl", log_flags); !status.ok()) {
    std::cerr << status.error().message << "\n";
    return 2;
  }
  if (validate->parsed()) {
    return ferry::RunValidate(paths, ferry::SchedulerEnvironment(), std::cout, std::cerr);
  }
  return 2;
}
