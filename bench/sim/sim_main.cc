// ferry-sim SCENARIO.toml [--json]: runs a workload in virtual time through the real
// scheduler, beside the no-coalescing and round-robin baselines. docs/simulator.md.
#include <CLI/CLI.hpp>
#include <iostream>

#include "bench/sim/report.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-sim: the worker scheduler in virtual time, against baselines"};
  std::string path;
  bool json = false;
  app.add_option("SCENARIO", path, "scenario .toml (see docs/simulator.md)")->required();
  app.add_flag("--json", json, "print one JSON object instead of a table");
  CLI11_PARSE(app, argc, argv);

  ferry::Result<ferry::sim::Scenario> scenario = ferry::sim::LoadScenario(path);
  if (!scenario.ok()) {
    std::cerr << scenario.error().message << "\n";
    return 2;
  }
  ferry::Result<ferry::sim::ScenarioReport> report = ferry::sim::RunScenario(*scenario);
  if (!report.ok()) {
    std::cerr << report.error().message << "\n";
    return 2;
  }
  if (json) {
    std::cout << ferry::sim::ReportToJson(*report).dump(2) << "\n";
  } else {
    ferry::sim::PrintTable(*report, std::cout);
  }
  return 0;
}
