// ferry-worker: one per GPU; runs the dispatch loop (see DESIGN.md, Processes).
#include <CLI/CLI.hpp>

#include "common/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-worker: one GPU's dispatch loop; started by ferryd, not by hand"};
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  CLI11_PARSE(app, argc, argv);
  std::cerr << "ferry-worker is started by ferryd; see --help\n";
  return 1;
}
