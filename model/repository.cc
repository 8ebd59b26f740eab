#include "model/repository.h"

#include <algorithm>
#include <filesystem>

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

Result<std::vector<RepositoryModel>> LoadRepository(const std::string& dir) {
  FERRY_ASSIGN_OR_RETURN(std::vector<std::string> names, ListRepository(dir));
  std::vector<RepositoryModel> models;
  for (std::string& name : names) {
    RepositoryModel model;
    Result<Bundle> bundle = LoadBundle(dir + "/" + name);
    if (bundle.ok()) {
      model.bundle = std::make_unique<Bundle>(std::move(*bundle));
    } else {
      model.failure = bundle.error();
    }
    model.name = std::move(name);
    models.push_back(std::move(model));
  }
  return models;
}

}  // namespace ferry
