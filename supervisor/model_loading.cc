// The node's model table changed while it runs: ferryctl load and unload, and the repository
// extension's (repository_requests.cc). A model name stands for the keys its repository
// directory serves (model/repository.h ModelKeys: the bundle itself, or the versions its
// policy selects); "NAME/V" for one version.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/clock.h"
#include "config/scheduler_config.h"
#include "supervisor/supervisor_impl.h"

namespace ferry::supervisor {

bool Supervisor::Impl::Unloading(uint32_t index) const {
  return std::any_of(pending_unloads.begin(), pending_unloads.end(),
                     [&](const PendingUnload& p) { return p.index == index; });
}

Result<json> Supervisor::Impl::LoadModel(const std::string& name) {
  FERRY_ASSIGN_OR_RETURN(json done, ApplyModel(name));
  if (!done["changed"].get<bool>()) {
    return InvalidArgument("model '" + name + "' is already loaded (index " + done["index"].dump() +
                           ")");
  }
  return done;
}

Result<json> Supervisor::Impl::ApplyModel(const std::string& name) {
  if (phase != Phase::kRunning) {
    return Unavailable("the node is stopping");
  }
  const std::string& repository = config.node.model_repository;
  bool one_version = ModelKeyVersion(name) != 0;
  std::vector<std::string> keys =
      one_version ? std::vector<std::string>{name} : ModelKeys(repository, name);
  std::vector<std::string> add;
  for (const std::string& key : keys) {
    if (std::find(model_table.begin(), model_table.end(), key) == model_table.end()) {
      add.push_back(key);
    }
  }
  // A model name applies its directory as it is now: versions its policy no longer selects
  // (or the bundle a versioned directory replaced) leave.
  std::vector<std::string> drop;
  for (size_t i = 0; i < model_table.size() && !one_version; ++i) {
    const std::string& key = model_table[i];
    if (key != "-" && ModelKeyName(key) == name &&
        std::find(keys.begin(), keys.end(), key) == keys.end() &&
        !Unloading(static_cast<uint32_t>(i))) {
      drop.push_back(key);
    }
  }
  for (const std::string& key : keys) {
    if (Unloading(IndexOf(key))) {  // Still in the table until its notice ends.
      return Unavailable("'" + key + "' is being unloaded; load '" + name + "' once it is gone");
    }
  }
  if (model_table.size() + add.size() > kMaxRepositoryModels) {
    return ResourceExhausted("the model table is full (" + std::to_string(kMaxRepositoryModels) +
                             " indices, unloaded ones included); restart the node to renumber");
  }
  // Every bundle checked before any changes, so one that cannot load changes nothing.
  for (const std::string& key : add) {
    Result<Bundle> bundle = LoadRepositoryBundle(repository, key);
    if (!bundle.ok()) {
      return Error{bundle.error().code, "load '" + key + "': " + bundle.error().message};
    }
  }
  size_t workers = 0;
  for (const std::string& key : add) {
    workers = LoadKey(key);
  }
  if (!add.empty()) {
    QueueHookhostRefresh();
  }
  json out = {{"model", name},
              {"loaded", add},
              {"unloaded", json::array()},
              {"changed", !add.empty() || !drop.empty()},
              {"workers", workers}};
  std::vector<uint32_t> leaving;
  for (const std::string& key : drop) {
    leaving.push_back(IndexOf(key));
    out["unloaded"].push_back(key);
  }
  if (!leaving.empty()) {
    UnloadIndices(name, leaving);
  }
  json indices = json::array();
  for (const std::string& key : keys) {
    indices.push_back(IndexOf(key));
  }
  out["indices"] = indices;
  out["index"] = indices.back();
  return out;
}

size_t Supervisor::Impl::LoadKey(const std::string& key) {
  auto index = static_cast<uint32_t>(model_table.size());
  model_table.push_back(key);
  shm::ControlMessage message{shm::ControlCode::kLoadModel, index, 0, 0};
  message.name = key;
  size_t workers = SendTableChange(message);
  spdlog::info(
      "load: model '{}' as index {}; {} worker(s) loading it, hook hosts restarting one "
      "at a time",
      key, index, workers);
  return workers;
}

Result<json> Supervisor::Impl::UnloadModel(const std::string& name) {
  if (phase != Phase::kRunning) {
    return Unavailable("the node is stopping");
  }
  std::vector<uint32_t> indices;
  for (size_t i = 0; i < model_table.size(); ++i) {
    const std::string& key = model_table[i];
    if (key == name || (ModelKeyVersion(key) != 0 && ModelKeyName(key) == name)) {
      indices.push_back(static_cast<uint32_t>(i));
    }
  }
  if (indices.empty()) {
    return NotFound("no model '" + name + "' is loaded");
  }
  std::erase_if(indices, [&](uint32_t index) { return Unloading(index); });
  if (indices.empty()) {
    return InvalidArgument("model '" + name + "' is being unloaded already");
  }
  return UnloadIndices(name, indices);
}

json Supervisor::Impl::UnloadIndices(const std::string& name,
                                     const std::vector<uint32_t>& indices) {
  double notice = config.supervisor.drain_notice_seconds;
  json keys = json::array();
  for (uint32_t index : indices) {
    keys.push_back(model_table[index]);
  }
  json out = {{"model", name}, {"keys", keys}, {"indices", indices}, {"index", indices.back()}};
  size_t workers = 0;
  for (uint32_t index : indices) {
    std::string key = model_table[index];
    if (notice > 0 && index < 64) {
      segment->leaving_models().fetch_or(uint64_t{1} << index);
      pending_unloads.push_back({index, key, MonotonicNs() + static_cast<int64_t>(notice * 1e9)});
      spdlog::info("unload: model '{}' answers not ready for {} s, then is unloaded", key, notice);
      out["notice_seconds"] = notice;
    } else {
      workers = CompleteUnload(index, key);
      out["workers"] = workers;
    }
  }
  return out;
}

void Supervisor::Impl::FinishUnloads(int64_t now) {
  for (size_t i = 0; i < pending_unloads.size();) {
    PendingUnload p = pending_unloads[i];
    if (phase != Phase::kRunning || now < p.at) {
      ++i;
      continue;
    }
    pending_unloads.erase(pending_unloads.begin() + static_cast<std::ptrdiff_t>(i));
    CompleteUnload(p.index, p.name);
  }
}

size_t Supervisor::Impl::CompleteUnload(uint32_t index, const std::string& name) {
  // The bit stays set: a worker may still report the model ready until it has read the
  // change, and an index is never reused (a model loaded again gets a new one).
  if (index < 64) {
    segment->leaving_models().fetch_or(uint64_t{1} << index);
  }
  model_table[index] = "-";
  size_t workers = SendTableChange({shm::ControlCode::kUnloadModel, index, 0, 0});
  weight_overrides.erase(name);
  batch_overrides.erase(name);
  plugin_faults.erase(name);  // A model loaded again starts with a clean record.
  failed_plugins.erase(name);
  QueueHookhostRefresh();
  spdlog::info("unload: model '{}' (index {}); its queued requests still run", name, index);
  return workers;
}

}  // namespace ferry::supervisor
