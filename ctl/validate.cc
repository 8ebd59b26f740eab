#include "ctl/validate.h"

#include <filesystem>

#include "config/scheduler_config.h"
#include "model/bundle.h"
#include "model/repository.h"

namespace ferry {
namespace {

std::string Join(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values) {
    out += (out.empty() ? "" : ",") + std::to_string(v);
  }
  return out;
}

std::string DescribeDevices(const DeviceSelection& d) {
  switch (d.kind) {
    case DeviceSelection::Kind::kAllGpus:
      return "all GPUs";
    case DeviceSelection::Kind::kGpuList:
      return "GPUs " + Join(d.gpu_ids);
    case DeviceSelection::Kind::kCpu:
      return std::to_string(d.cpu_workers) + " CPU workers";
  }
  return "?";
}

Result<std::string> ValidateNodeFile(const std::string& path, const Environment& env) {
  FERRY_ASSIGN_OR_RETURN(NodeConfig config, LoadNodeConfig(path, env));
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string& repo = config.node.model_repository;
  if (!fs::is_directory(repo, ec)) {
    return NotFound(path + ": node.model_repository: '" + repo + "' is not a directory");
  }
  std::string missing;
  for (const auto& [name, unused] : config.scheduler.models) {
    // A bundle, a version directory ("NAME/V"), or a versioned model (all its versions).
    bool versioned = ModelKeyVersion(name) == 0 && !PresentVersions(repo, name).empty();
    if (!versioned && !fs::is_regular_file(fs::path(repo) / name / "manifest.toml", ec)) {
      missing += (missing.empty() ? "" : "\n") + path + ": scheduler.models." + name +
                 ": no bundle '" + name + "' in " + repo;
    }
  }
  if (!missing.empty()) {
    return NotFound(missing);
  }
  std::string warnings;
  for (const std::string& w : config.scheduler.deprecations) {
    warnings += "\n  warning: " + w;
  }
  return "node file " + path + " (node '" + config.node.name + "', " +
         DescribeDevices(config.node.devices) + ", discipline " +
         std::string(DisciplineName(config.scheduler.discipline)) + ", " +
         std::to_string(config.scheduler.models.size()) + " model settings)" + warnings;
}

Result<std::string> ValidateBundleDir(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(Bundle bundle, LoadBundle(path));
  const Manifest& m = bundle.manifest;
  return "bundle " + path + " (" + m.name + " v" + std::to_string(m.version) + ", " +
         std::to_string(m.variants.size()) + " variant(s), sizes " + Join(m.batch_sizes) + ", " +
         std::to_string(m.program.size()) + " ops, " +
         std::to_string(bundle.weights.index().tensors.size()) + " weights)";
}

}  // namespace

int RunValidate(const std::vector<std::string>& paths, const Environment& env, std::ostream& out,
                std::ostream& err) {
  bool all_ok = true;
  for (const std::string& path : paths) {
    std::error_code ec;
    Result<std::string> result = std::filesystem::is_directory(path, ec)
                                     ? ValidateBundleDir(path)
                                     : ValidateNodeFile(path, env);
    if (result.ok()) {
      out << "OK " << *result << "\n";
    } else {
      all_ok = false;
      err << "FAIL " << path << "\n";
      std::string message = result.error().message;
      size_t start = 0;
      while (start <= message.size()) {
        size_t end = message.find('\n', start);
        err << "  " << message.substr(start, end - start) << "\n";
        if (end == std::string::npos) {
          break;
        }
        start = end + 1;
      }
    }
  }
  return all_ok ? 0 : 2;
}

}  // namespace ferry
