#include "model/repository.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/file.h"
#include "config/scheduler_config.h"

namespace ferry {

namespace {

namespace fs = std::filesystem;

bool HasManifest(const fs::path& model) {
  std::error_code ec;
  return fs::symlink_status(model / "manifest.toml", ec).type() != fs::file_type::not_found;
}

// The policy in the newest version's manifest; the default (latest 1) when it cannot be read.
VersionPolicy PolicyOf(const fs::path& model, int64_t newest) {
  std::string path = (model / std::to_string(newest) / "manifest.toml").string();
  Result<std::string> text = ReadRegularFile(path, 1 << 20, Symlinks::kRefuse);
  Result<Manifest> manifest = text.ok() ? ParseManifest(*text, path) : text.error();
  return manifest.ok() ? manifest->version_policy : VersionPolicy{};
}

std::vector<int64_t> Select(const VersionPolicy& policy, const std::vector<int64_t>& present) {
  switch (policy.kind) {
    case VersionPolicy::Kind::kAll: {  // The newest kMaxVersionsServed.
      size_t n = std::min(present.size(), static_cast<size_t>(kMaxVersionsServed));
      return {present.end() - static_cast<std::ptrdiff_t>(n), present.end()};
    }
    case VersionPolicy::Kind::kLatest: {
      size_t n = std::min(present.size(), static_cast<size_t>(policy.latest));
      return {present.end() - static_cast<std::ptrdiff_t>(n), present.end()};
    }
    case VersionPolicy::Kind::kSpecific: {
      std::vector<int64_t> out;
      for (int64_t v : present) {
        if (std::find(policy.specific.begin(), policy.specific.end(), v) != policy.specific.end()) {
          out.push_back(v);
        }
      }
      return out;
    }
  }
  return {};
}

}  // namespace

std::vector<int64_t> PresentVersions(const std::string& dir, const std::string& name) {
  fs::path model = fs::path(dir) / name;
  std::vector<int64_t> versions;
  std::error_code ec;
  if (!IsValidModelName(name) || HasManifest(model) || !fs::is_directory(model, ec)) {
    return versions;
  }
  fs::directory_iterator it(model, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string key = name + "/" + it->path().filename().string();
    std::error_code type_ec;
    if (IsValidModelKey(key) && it->is_directory(type_ec)) {
      versions.push_back(ModelKeyVersion(key));
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<std::string> ModelKeys(const std::string& dir, const std::string& name) {
  std::vector<int64_t> present = PresentVersions(dir, name);
  if (present.empty()) {
    return {name};
  }
  std::vector<int64_t> chosen = Select(PolicyOf(fs::path(dir) / name, present.back()), present);
  if (chosen.empty()) {
    return {name};
  }
  std::vector<std::string> keys;
  for (int64_t v : chosen) {
    keys.push_back(name + "/" + std::to_string(v));
  }
  return keys;
}

Result<std::vector<std::string>> ListRepository(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return NotFound("model repository " + dir + ": not a directory");
  }
  std::vector<std::string> names;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (!IsValidModelName(name) || name.front() == '.' || !it->is_directory(type_ec)) {
      continue;
    }
    names.push_back(std::move(name));
    if (names.size() > kMaxRepositoryModels) {
      break;
    }
  }
  if (ec) {
    return Internal("model repository " + dir + ": " + ec.message());
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> keys;
  for (const std::string& name : names) {
    for (std::string& key : ModelKeys(dir, name)) {
      keys.push_back(std::move(key));
    }
  }
  if (keys.size() > kMaxRepositoryModels) {
    return InvalidArgument("model repository " + dir + ": more than " +
                           std::to_string(kMaxRepositoryModels) + " models and versions");
  }
  return keys;
}

Result<Bundle> LoadRepositoryBundle(const std::string& dir, const std::string& key) {
  if (!IsValidModelKey(key)) {
    return InvalidArgument("'" + key.substr(0, 160) + "' is not a model name or NAME/VERSION");
  }
  std::error_code ec;
  fs::path repository = fs::canonical(dir, ec);
  if (ec) {
    return NotFound("model repository " + dir + ": " + ec.message());
  }
  fs::path bundle = fs::canonical(fs::path(dir) / key, ec);
  if (ec) {
    return NotFound("bundle " + dir + "/" + key + ": " + ec.message());
  }
  bool versioned = ModelKeyVersion(key) != 0;
  std::string name(ModelKeyName(key));
  // A model directly inside the repository; a version directly inside its model's directory.
  fs::path model = versioned ? fs::canonical(fs::path(dir) / name, ec) : bundle;
  bool placed =
      !ec && model.parent_path() == repository && (!versioned || bundle.parent_path() == model);
  if (!placed) {
    return InvalidArgument("bundle " + dir + "/" + key + " resolves to " + bundle.string() +
                           ", outside its place in the model repository " + repository.string() +
                           " (a symlink that leaves it is refused)");
  }
  if (versioned && HasManifest(model)) {
    return InvalidArgument("model '" + name + "' is a bundle of its own (" + name +
                           "/manifest.toml), not a versioned model: load '" + name + "'");
  }
  if (!versioned && !PresentVersions(dir, key).empty()) {
    return InvalidArgument("model '" + key +
                           "' has version directories but its version_policy (in the newest "
                           "version's manifest) selects none of them");
  }
  return LoadBundle((fs::path(dir) / key).string());
}

std::string UnloadedName(size_t index) { return "(unloaded " + std::to_string(index) + ")"; }

Result<std::vector<RepositoryModel>> LoadRepository(const std::string& dir) {
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> names, ListRepository(dir));
  return LoadModelTable(dir, names);
}

std::vector<std::string> SplitModelTable(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    out.emplace_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}

Result<std::vector<RepositoryModel>> LoadModelTable(const std::string& dir,
                                                    const std::vector<std::string>& table) {
  if (table.size() > kMaxRepositoryModels) {
    return InvalidArgument("model table: " + std::to_string(table.size()) + " entries, more than " +
                           std::to_string(kMaxRepositoryModels));
  }
  std::set<std::string> seen;
  for (const std::string& name : table) {
    if (name != "-" && (!IsValidModelKey(name) || !seen.insert(name).second)) {
      return InvalidArgument("model table: '" + name +
                             "' is not a valid model key, or is listed twice");
    }
  }
  std::vector<RepositoryModel> models;
  for (const std::string& name : table) {
    RepositoryModel model;
    if (name == "-") {
      model.name = UnloadedName(models.size());
      model.unloaded = true;
      model.failure = NotFound("model index " + std::to_string(models.size()) + " was unloaded");
      models.push_back(std::move(model));
      continue;
    }
    Result<Bundle> bundle = LoadRepositoryBundle(dir, name);
    if (bundle.ok()) {
      model.bundle = std::make_unique<Bundle>(std::move(*bundle));
    } else {
      model.failure = bundle.error();
    }
    model.name = name;
    models.push_back(std::move(model));
  }
  return models;
}

}  // namespace ferry
