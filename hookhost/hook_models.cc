#include "hookhost/hook_models.h"

namespace ferry::hookhost {

Result<std::vector<HookModel>> LoadHookModels(const std::string& dir) {
  FERRY_ASSIGN_OR_RETURN(std::vector<RepositoryModel> repository, LoadRepository(dir));
  std::vector<HookModel> models;
  for (size_t i = 0; i < repository.size(); ++i) {
    RepositoryModel& r = repository[i];
    HookModel m;
    m.name = r.name;
    m.index = static_cast<uint32_t>(i);
    m.failure = std::move(r.failure);
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
  return models;
}

}  // namespace ferry::hookhost
