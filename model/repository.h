// The model repository: one bundle per sub-directory of [node] model_repository. Models are
// numbered by name order; that number is the model index on the wire (DescriptorData::model)
// and in the worker's scheduler and status, so every process that lists the same repository
// (workers and hook hosts) agrees on it. A bundle that fails to load keeps its number, marked
// failed with its error, and the others serve.
//
// Thread safety: plain data and pure functions; safe for concurrent use.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/bundle.h"

namespace ferry {

// At most this many models per repository (a worker's status snapshot holds as many).
inline constexpr size_t kMaxRepositoryModels = 64;

struct RepositoryModel {
  std::string name;
  std::unique_ptr<Bundle> bundle;  // Null when the bundle failed to load.
  std::optional<Error> failure;    // Why it failed.
};

// The sub-directories of `dir` whose names are valid model names, sorted. Other entries
// (files, hidden or invalid names) are skipped. NOT_FOUND when `dir` is not a directory;
// INVALID_ARGUMENT beyond kMaxRepositoryModels models.
Result<std::vector<std::string>> ListRepository(const std::string& dir);

// Lists and loads every bundle (failures kept per model, see above).
Result<std::vector<RepositoryModel>> LoadRepository(const std::string& dir);

}  // namespace ferry
