#include "model/bundle.h"

#include <filesystem>
#include <set>

#include "common/file.h"
#include "config/scheduler_config.h"
#include "config/toml_reader.h"
#include "model/shape_inference.h"

namespace ferry {

Status ValidateProgram(const Manifest& manifest, const SafetensorsIndex& weights) {
  WeightLookup lookup = [&weights](const std::string& name) -> std::optional<WeightSpec> {
    const TensorInfo* info = weights.Find(name);
    if (info == nullptr) {
      return std::nullopt;
    }
    return WeightSpec{info->dtype, info->shape};
  };
  std::set<std::string> seen;
  std::string message;
  for (const ShapeVariant& variant : manifest.variants) {
    for (int64_t size : manifest.batch_sizes) {
      Result<std::map<std::string, Shape>> shapes = InferShapes(manifest, variant, size, lookup);
      if (!shapes.ok() && seen.insert(shapes.error().message).second) {
        message += (message.empty() ? "" : "\n") + shapes.error().message;
      }
    }
  }
  if (!message.empty()) {
    return InvalidArgument(message);
  }
  return OkStatus();
}

Result<Bundle> LoadBundle(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFound("bundle " + dir + ": not a directory");
  }
  fs::path root = fs::path(dir).lexically_normal();
  if (root.filename().empty()) {
    root = root.parent_path();
  }
  std::string manifest_path = (root / "manifest.toml").string();
  FERRY_ASSIGN_OR_RETURN(std::string text,
                         ReadRegularFile(manifest_path, 1 << 20, Symlinks::kRefuse));
  FERRY_ASSIGN_OR_RETURN(Manifest manifest, ParseManifest(text, manifest_path));
  std::string dir_name = root.filename().string();
  std::string parent_name = root.parent_path().filename().string();
  if (IsValidModelKey(parent_name + "/" + dir_name) && manifest.name == parent_name) {
    // A version directory: its number is the version (docs/bundles.md, "Versions").
    int64_t version = ModelKeyVersion(parent_name + "/" + dir_name);
    if (manifest.version_stated && manifest.version != version) {
      return InvalidArgument(manifest_path + ": version " + std::to_string(manifest.version) +
                             " differs from its version directory '" + dir_name + "'");
    }
    manifest.version = version;
  } else if (manifest.name != dir_name) {
    return InvalidArgument(manifest_path + ": name '" + manifest.name +
                           "' differs from the bundle directory '" + dir_name + "'");
  }
  // A pipeline has no weights and no program: its plugin calls models that have.
  SafetensorsFile weights = SafetensorsFile::Empty();
  if (!manifest.pipeline()) {
    FERRY_ASSIGN_OR_RETURN(weights, SafetensorsFile::Open((root / "weights.safetensors").string()));
    Status program = ValidateProgram(manifest, weights.index());
    if (!program.ok()) {
      return InvalidArgument("bundle " + root.string() + ": " + program.error().message);
    }
  }
  std::string plugin_path;
  if (!manifest.hooks.plugin.empty()) {
    // Symlinks resolved: the plugin must still be a regular file inside the bundle.
    fs::path real_root = fs::canonical(root, ec);
    fs::path plugin = ec ? fs::path() : fs::canonical(root / manifest.hooks.plugin, ec);
    std::string prefix = real_root.string() + "/";
    if (ec || plugin.string().rfind(prefix, 0) != 0 || !fs::is_regular_file(plugin, ec)) {
      return InvalidArgument("bundle " + root.string() + ": hook plugin '" + manifest.hooks.plugin +
                             "' is not a regular file inside the bundle (symlinks resolved)");
    }
    plugin_path = plugin.string();
  }
  return Bundle{root.string(), std::move(manifest), std::move(weights), plugin_path};
}

}  // namespace ferry
