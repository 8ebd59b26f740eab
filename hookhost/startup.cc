#include "hookhost/startup.h"

namespace ferry::hookhost {

Result<LoadedModels> LoadModelsConfined(const std::string& repository,
                                        const std::optional<std::vector<std::string>>& table,
                                        bool confine, uint64_t max_memory) {
  LoadedModels loaded;
  loaded.confinement = "unconfined: [hooks] sandbox = \"off\"";
  BeforePlugins enter = nullptr;
  if (confine) {
    FERRY_ASSIGN_OR_RETURN(ThreadCensus census, ThreadCensus::Open());
    loaded.census.emplace(std::move(census));
    enter = [&loaded, max_memory](const std::vector<std::string>& plugin_dirs) -> Status {
      std::vector<std::string> readable = SystemLibraryPaths();
      readable.insert(readable.end(), plugin_dirs.begin(), plugin_dirs.end());
      Result<SandboxReport> report = EnterLoadSandbox(readable, max_memory);
      if (!report.ok()) {
        return Error{report.error().code,
                     "cannot enter the load sandbox: " + report.error().message};
      }
      loaded.confinement =
          std::string("confined: read-only files ") +
          (report->landlock_abi > 0 ? "beneath their bundles and the system libraries"
                                    : "anywhere (the kernel has no Landlock)") +
          ", no sockets or processes" +
          (report->data_limit > 0
               ? ", RLIMIT_DATA " + std::to_string(report->data_limit >> 20) + " MiB"
               : std::string());
      return OkStatus();
    };
  }
  FERRY_ASSIGN_OR_RETURN(loaded.models, table ? LoadHookModels(repository, *table, enter)
                                              : LoadHookModels(repository, enter));
  return loaded;
}

Result<SandboxReport> Seal(const LoadedModels& loaded) {
  FERRY_ASSIGN_OR_RETURN(int threads, loaded.census->Count());
  if (threads != 1) {
    return InvalidArgument("a plugin left " + std::to_string(threads - 1) +
                           " thread(s) running after create(); start threads in a hook "
                           "call, not in create()");
  }
  return EnterSandbox({});
}

}  // namespace ferry::hookhost
