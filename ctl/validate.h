// `ferryctl validate PATH...`: checks node files and model bundle directories without
// starting anything, so an operator can vet a change before a restart.
//
// Thread safety: safe for concurrent use (no shared state).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "config/node_config.h"

namespace ferry {

// Validates each path: a directory is a model bundle, a file is a node file. Writes one
// "OK ..." line per valid item to `out` and every error of each invalid one to `err`.
// A node file's model repository must exist and hold a bundle for every
// [scheduler.models.NAME]. Returns the process exit code: 0 when all are valid, 2 otherwise.
int RunValidate(const std::vector<std::string>& paths, const Environment& env, std::ostream& out,
                std::ostream& err);

}  // namespace ferry
