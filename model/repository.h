// The model repository: one sub-directory per model, either a bundle (manifest.toml inside)
// or a versioned model (numbered version directories, each a bundle; docs/bundles.md,
// "Versions"). Each bundle served is one entry of the node's model table, named by its model
// key (config/scheduler_config.h: "NAME", or "NAME/V" for a version). Entries are numbered
// by key order; that number is the model index on the wire (DescriptorData::model) and in the
// worker's scheduler and status, so every process that lists the same repository (workers
// and hook hosts) agrees on it. A bundle that fails to load keeps its number, marked failed
// with its error, and the others serve.
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
  std::string name;                // The model key.
  std::unique_ptr<Bundle> bundle;  // Null when the bundle failed to load.
  std::optional<Error> failure;    // Why it failed.
  bool unloaded = false;           // A placeholder keeping an unloaded model's index.
};

// An unloaded model's index keeps this name (never a valid model name, so no request and no
// later load can match it).
std::string UnloadedName(size_t index);

// The model keys of the repository `dir`, sorted: for each sub-directory whose name is a
// valid model name, ModelKeys. Other entries (files, hidden or invalid names) are skipped.
// NOT_FOUND when `dir` is not a directory; INVALID_ARGUMENT beyond kMaxRepositoryModels keys.
Result<std::vector<std::string>> ListRepository(const std::string& dir);

// The keys the model `name` of the repository `dir` serves now: {name} for a bundle; for a
// versioned model, "NAME/V" for each version its policy selects among those present,
// ascending, read from the newest version's manifest (latest 1 when that manifest cannot be
// read), or {name} when it selects none (LoadRepositoryBundle then says why).
std::vector<std::string> ModelKeys(const std::string& dir, const std::string& name);

// The version numbers of the versioned model `name` present in `dir`, ascending; empty for a
// bundle (a manifest.toml in its directory) or a missing directory.
std::vector<int64_t> PresentVersions(const std::string& dir, const std::string& name);

// Loads the bundle of the model key `key` from the repository `dir`. INVALID_ARGUMENT when the
// key is not valid, when the bundle's directory, symlinks resolved, is not inside the
// repository at the key's place (a model directly inside, a version inside its model's
// directory: a link that leaves the repository would let anyone who can write it point a
// node at any directory), or when `key` names a versioned model none of whose versions its
// policy serves; the LoadBundle errors otherwise.
Result<Bundle> LoadRepositoryBundle(const std::string& dir, const std::string& key);

// Lists and loads every bundle (failures kept per model, see above).
Result<std::vector<RepositoryModel>> LoadRepository(const std::string& dir);

// The node's model table as ferryd hands it to its children (--models): one entry per index,
// a model key, or "-" for an index whose model was unloaded (a placeholder). Loads each
// bundle from `dir`. INVALID_ARGUMENT for an entry that is neither, a key listed twice or
// more than kMaxRepositoryModels entries.
Result<std::vector<RepositoryModel>> LoadModelTable(const std::string& dir,
                                                    const std::vector<std::string>& table);
// Splits a --models value at commas ("" is an empty table).
std::vector<std::string> SplitModelTable(std::string_view text);

}  // namespace ferry
