// The models a hook host serves: the repository's bundles (numbered as the workers number
// them, model/repository.h) with each bundle's hook plugin opened and created.
//
// A model whose bundle or plugin fails keeps its number and its error (a plugin without the
// preprocess or postprocess its manifest's hooks.inputs / hooks.outputs need fails too, as does
// a pipeline whose plugin has no run or whose [pipeline] calls name a model that is missing or
// a pipeline); requests for it are answered with that error, and the others serve.
//
// Thread safety: LoadHookModels runs before the serving sandbox (it opens files and dlopens
// plugins; hookhost_main enters the load sandbox through `before_plugins`); the result is
// immutable afterwards and safe for concurrent use.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "hookhost/plugin.h"
#include "model/repository.h"

namespace ferry::hookhost {

struct HookModel {
  std::string name;                // As clients name it.
  std::string key;                 // In the model table and the status (model/repository.h).
  int64_t version = 0;             // Its manifest's (a failed plain bundle's: 0).
  uint32_t index = 0;              // On the wire.
  std::unique_ptr<Bundle> bundle;  // Null when it failed.
  std::optional<Error> failure;
  std::unique_ptr<PluginInstance> plugin;  // Null when the bundle has no hooks.
  std::vector<uint32_t> calls;             // A pipeline's callees (indices), in manifest order.
  bool unloaded = false;                   // A placeholder for an unloaded index.

  bool pipeline() const { return bundle != nullptr && bundle->manifest.pipeline(); }
  const Manifest& manifest() const { return bundle->manifest; }  // REQUIRES: !failure.
};

// Called after every manifest is read and before any plugin is opened, with the directories
// (canonical) of the bundles that have plugins; an error ends the load.
using BeforePlugins = std::function<Status(const std::vector<std::string>& plugin_dirs)>;

// A pipeline's call of a versioned model runs its newest version served.
//
// Lists and loads the repository at `dir`, opening each bundle's plugin.
Result<std::vector<HookModel>> LoadHookModels(const std::string& dir,
                                              const BeforePlugins& before_plugins = nullptr);
// The same for the node's model table (model/repository.h LoadModelTable): an unloaded
// index is a placeholder no request can name.
Result<std::vector<HookModel>> LoadHookModels(const std::string& dir,
                                              const std::vector<std::string>& table,
                                              const BeforePlugins& before_plugins = nullptr);

}  // namespace ferry::hookhost
