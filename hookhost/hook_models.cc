#include "hookhost/hook_models.h"

#include <algorithm>

namespace ferry::hookhost {

Result<std::vector<HookModel>> LoadHookModels(const std::string& dir) {
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> names, ListRepository(dir));
  return LoadHookModels(dir, names);
}

Result<std::vector<HookModel>> LoadHookModels(const std::string& dir,
                                              const std::vector<std::string>& table) {
  FERRY_ASSIGN_OR_RETURN(std::vector<RepositoryModel> repository, LoadModelTable(dir, table));
  std::vector<HookModel> models;
  for (size_t i = 0; i < repository.size(); ++i) {
    RepositoryModel& r = repository[i];
    HookModel m;
    m.name = r.name;
    m.index = static_cast<uint32_t>(i);
    m.failure = std::move(r.failure);
    m.unloaded = r.unloaded;
    m.bundle = std::move(r.bundle);
    if (m.bundle != nullptr && !m.bundle->plugin_path.empty()) {
      Result<std::shared_ptr<Plugin>> plugin = Plugin::Open(m.bundle->plugin_path);
      Result<std::unique_ptr<PluginInstance>> instance =
          plugin.ok() ? PluginInstance::Create(*plugin, m.manifest().hooks.config)
                      : Result<std::unique_ptr<PluginInstance>>(plugin.error());
      if (instance.ok()) {
        // Client tensors that differ from the model's need the plugin call that produces them.
        const ManifestHooks& hooks = m.manifest().hooks;
        std::string missing = !hooks.inputs.empty() && !(*instance)->has_preprocess()
                                  ? "hooks.inputs but its plugin has no preprocess"
                              : !hooks.outputs.empty() && !(*instance)->has_postprocess()
                                  ? "hooks.outputs but its plugin has no postprocess"
                              : m.manifest().pipeline() && !(*instance)->has_run()
                                  ? "kind = \"pipeline\" but its plugin has no run (ABI version 2)"
                                  : "";
        if (missing.empty()) {
          m.plugin = std::move(*instance);
        } else {
          m.failure = InvalidArgument("model '" + m.name + "': the manifest declares " + missing);
        }
      } else {
        m.failure =
            Error{instance.error().code, "model '" + m.name + "': " + instance.error().message};
      }
    }
    models.push_back(std::move(m));
  }
  // A pipeline's calls: models of this repository that are not pipelines themselves.
  for (HookModel& m : models) {
    if (m.failure || !m.manifest().pipeline()) {
      continue;
    }
    for (const std::string& call : m.manifest().calls) {
      auto callee = std::find_if(models.begin(), models.end(),
                                 [&](const HookModel& c) { return c.name == call; });
      if (callee == models.end() || (callee->bundle && callee->manifest().pipeline())) {
        m.failure = InvalidArgument(
            "pipeline '" + m.name + "': [pipeline] calls '" + call +
            (callee == models.end() ? "', which is not in the repository" : "', another pipeline"));
        m.calls.clear();
        break;
      }
      m.calls.push_back(callee->index);
    }
  }
  return models;
}

}  // namespace ferry::hookhost
