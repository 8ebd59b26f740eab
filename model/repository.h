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
#include <string_view>
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
  bool unloaded = false;           // A placeholder keeping an unloaded model's index.
};

// An unloaded model's index keeps this name (never a valid model name, so no request and no
// later load can match it).
std::string UnloadedName(size_t index);

// The sub-directories of `dir` whose names are valid model names, sorted. Other entries
// (files, hidden or invalid names) are skipped. NOT_FOUND when `dir` is not a directory;
// INVALID_ARGUMENT beyond kMaxRepositoryModels models.
Result<std::vector<std::string>> ListRepository(const std::string& dir);

// Loads the bundle `name` of the repository `dir`. INVALID_ARGUMENT when the bundle's
// directory, symlinks resolved, is not directly inside the repository (a link that leaves it
// would let anyone who can write the repository point a node at any directory); the
// LoadBundle errors otherwise.
Result<Bundle> LoadRepositoryBundle(const std::string& dir, const std::string& name);

// Lists and loads every bundle (failures kept per model, see above).
Result<std::vector<RepositoryModel>> LoadRepository(const std::string& dir);

// The node's model table as ferryd hands it to its children (--models): one entry per index,
// a model name, or "-" for an index whose model was unloaded (a placeholder). Loads each
// bundle from `dir`. INVALID_ARGUMENT for an entry that is neither, a name listed twice or
// more than kMaxRepositoryModels entries.
Result<std::vector<RepositoryModel>> LoadModelTable(const std::string& dir,
                                                    const std::vector<std::string>& table);
// Splits a --models value at commas ("" is an empty table).
std::vector<std::string> SplitModelTable(std::string_view text);

}  // namespace ferry
