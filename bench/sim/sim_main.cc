// ferry-sim SCENARIO.toml [--json] [--trace FILE.csv]: runs a workload in virtual time through the
// real scheduler, beside the no-coalescing and round-robin baselines. docs/simulator.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "bench/sim/report.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-sim: the worker scheduler in virtual time, against baselines"};
  std::string path;
  bool json = false;
  app.add_option("SCENARIO", path, "scenario .toml (see docs/simulator.md)")->required();
  app.add_flag("--json", json, "print one JSON object instead of a table");
  std::string trace_path;
  app.add_option("--trace", trace_path,
                 "write one CSV line per dispatch of the scheduler's run: "
                 "start_s,end_s,model,variant,batch_size,rows,requests");
  CLI11_PARSE(app, argc, argv);

  ferry::Result<ferry::sim::Scenario> scenario = ferry::sim::LoadScenario(path);
  if (!scenario.ok()) {
    std::cerr << scenario.error().message << "\n";
    return 2;
  }
  std::vector<ferry::sim::TraceRow> trace;
  ferry::Result<ferry::sim::ScenarioReport> report =
      ferry::sim::RunScenario(*scenario, trace_path.empty() ? nullptr : &trace);
  if (!report.ok()) {
    std::cerr << report.error().message << "\n";
    return 2;
  }
  if (!trace_path.empty()) {
    std::ofstream out(trace_path);
    out << "start_s,end_s,model,variant,batch_size,rows,requests\n";
    char line[160];
    for (const ferry::sim::TraceRow& row : trace) {
      std::snprintf(line, sizeof(line), "%.9f,%.9f,%s,%d,%lld,%lld,%zu\n", row.start_s, row.end_s,
                    scenario->models[static_cast<size_t>(row.model)].name.c_str(), row.variant,
                    static_cast<long long>(row.batch_size), static_cast<long long>(row.rows),
                    row.requests);
      out << line;
    }
    if (!out) {
      std::cerr << trace_path << ": cannot write the trace\n";
      return 2;
    }
  }
  if (json) {
    std::cout << ferry::sim::ReportToJson(*report).dump(2) << "\n";
  } else {
    ferry::sim::PrintTable(*report, std::cout);
  }
  return 0;
}
