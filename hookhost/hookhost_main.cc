// ferry-hookhost: sandboxed front end and plugin host (see DESIGN.md, Processes).
#include <CLI/CLI.hpp>

#include "common/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry-hookhost: KServe v2 front end and hook plugin host; started by ferryd"};
  ferry::LogFlags log_flags;
  ferry::AddLogFlags(app, &log_flags);
  CLI11_PARSE(app, argc, argv);
  std::cerr << "ferry-hookhost is started by ferryd; see --help\n";
  return 1;
}
