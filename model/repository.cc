#include "model/repository.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "config/scheduler_config.h"

namespace ferry {

Result<std::vector<std::string>> ListRepository(const std::string& dir) {
  namespace fs = std::filesystem;
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
      return InvalidArgument("model repository " + dir + ": more than " +
                             std::to_string(kMaxRepositoryModels) + " models");
    }
  }
  if (ec) {
    return Internal("model repository " + dir + ": " + ec.message());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<Bundle> LoadRepositoryBundle(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path repository = fs::canonical(dir, ec);
  if (ec) {
    return NotFound("model repository " + dir + ": " + ec.message());
  }
  fs::path bundle = fs::canonical(fs::path(dir) / name, ec);
  if (ec) {
    return NotFound("bundle " + dir + "/" + name + ": " + ec.message());
  }
  if (bundle.parent_path() != repository) {
    return InvalidArgument("bundle " + dir + "/" + name + " resolves to " + bundle.string() +
                           ", outside the model repository " + repository.string() +
                           " (a symlink that leaves the repository is refused)");
  }
  return LoadBundle(dir + "/" + name);
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
    if (name != "-" && (!IsValidModelName(name) || !seen.insert(name).second)) {
      return InvalidArgument("model table: '" + name +
                             "' is not a valid model name, or is listed twice");
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
