#include "hookhost/hook_models.h"

#include <algorithm>
#include <filesystem>

#include "config/scheduler_config.h"

namespace ferry::hookhost {

namespace fs = std::filesystem;

Result<std::vector<HookModel>> LoadHookModels(const std::string& dir,
                                              const BeforePlugins& before_plugins) {
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> names, ListRepository(dir));
  return LoadHookModels(dir, names, before_plugins);
}

namespace {

// Opens and creates `m`'s plugin; a failure becomes the model's.
void OpenPlugin(HookModel& m) {
  Result<std::shared_ptr<Plugin>> plugin = Plugin::Open(m.bundle->plugin_path);
  Result<std::unique_ptr<PluginInstance>> instance =
      plugin.ok() ? PluginInstance::Create(*plugin, m.manifest().hooks.config)
                  : Result<std::unique_ptr<PluginInstance>>(plugin.error());
  if (!instance.ok()) {
    m.failure = Error{instance.error().code, "model '" + m.name + "': " + instance.error().message};
    return;
  }
  // Client tensors that differ from the model's need the plugin call that produces them.
  const ManifestHooks& hooks = m.manifest().hooks;
  std::string missing = !hooks.inputs.empty() && !(*instance)->has_preprocess()
                            ? "hooks.inputs but its plugin has no preprocess"
                        : !hooks.outputs.empty() && !(*instance)->has_postprocess()
                            ? "hooks.outputs but its plugin has no postprocess"
                        : m.manifest().pipeline() && !(*instance)->has_run()
                            ? "kind = \"pipeline\" but its plugin has no run (ABI version 2)"
                        : m.manifest().decoupled && !(*instance)->decoupled_capable()
                            ? "[pipeline] decoupled but its plugin predates ABI version 3 (send)"
                            : "";
  if (missing.empty()) {
    m.plugin = std::move(*instance);
  } else {
    m.failure = InvalidArgument("model '" + m.name + "': the manifest declares " + missing);
  }
}

}  // namespace

Result<std::vector<HookModel>> LoadHookModels(const std::string& dir,
                                              const std::vector<std::string>& table,
                                              const BeforePlugins& before_plugins) {
  FERRY_ASSIGN_OR_RETURN(std::vector<RepositoryModel> repository, LoadModelTable(dir, table));
  std::vector<HookModel> models;
  std::vector<std::string> plugin_dirs;
  for (size_t i = 0; i < repository.size(); ++i) {
    RepositoryModel& r = repository[i];
    HookModel m;
    m.key = r.name;
    m.name = std::string(ModelKeyName(r.name));
    m.version = r.bundle != nullptr ? r.bundle->manifest.version : ModelKeyVersion(r.name);
    m.index = static_cast<uint32_t>(i);
    m.failure = std::move(r.failure);
    m.unloaded = r.unloaded;
    m.bundle = std::move(r.bundle);
    if (m.bundle != nullptr && !m.bundle->plugin_path.empty()) {
      std::error_code error;
      fs::path bundle_dir = fs::canonical(fs::path(m.bundle->plugin_path).parent_path(), error);
      if (!error) {
        plugin_dirs.push_back(bundle_dir.string());
      }
    }
    models.push_back(std::move(m));
  }
  if (before_plugins) {
    FERRY_RETURN_IF_ERROR(before_plugins(plugin_dirs));
  }
  for (HookModel& m : models) {
    if (m.bundle != nullptr && !m.bundle->plugin_path.empty()) {
      OpenPlugin(m);
    }
  }
  // A pipeline's calls: models of this repository that are not pipelines themselves.
  for (HookModel& m : models) {
    if (m.failure || !m.manifest().pipeline()) {
      continue;
    }
    for (const std::string& call : m.manifest().calls) {
      // Its newest version that loaded, else its newest (whose failure the pipeline shows).
      auto callee = models.end();
      for (auto c = models.begin(); c != models.end(); ++c) {
        if (c->name != call || c->unloaded) {
          continue;
        }
        bool better = callee == models.end() || (callee->failure && !c->failure) ||
                      (!callee->failure == !c->failure && c->version > callee->version);
        if (better) {
          callee = c;
        }
      }
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
