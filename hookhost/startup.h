// A hook host's start before it serves, shared by ferry-hookhost and the test peer: the
// repository loaded with every plugin opened and created inside the load sandbox, then the
// serving sandbox entered once no plugin left a thread running (sandbox.h, docs/hookhost.md
// "Sandbox").
//
// Thread safety: from the main thread while it is the only thread (both stages bind only the
// threads started after them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "hookhost/hook_models.h"
#include "hookhost/sandbox.h"

namespace ferry::hookhost {

struct LoadedModels {
  std::vector<HookModel> models;
  std::optional<ThreadCensus> census;  // Set when the plugins loaded confined.
  std::string confinement;             // How they loaded, for the start-up log.
};

// LoadHookModels of `repository` (the node's model table when `table` is set); with
// `confine`, the load sandbox is entered after the manifests are read, granting reading
// beneath the system libraries and the bundles that have plugins, and bounding the memory
// the host may add from then on by `max_memory` ([hooks] max_memory; 0: unbounded).
Result<LoadedModels> LoadModelsConfined(const std::string& repository,
                                        const std::optional<std::vector<std::string>>& table,
                                        bool confine, uint64_t max_memory = 0);

// REQUIRES: `loaded` came from LoadModelsConfined with confine. INVALID_ARGUMENT when a
// plugin left a thread running; else enters the serving sandbox (EnterSandbox).
Result<SandboxReport> Seal(const LoadedModels& loaded);

}  // namespace ferry::hookhost
