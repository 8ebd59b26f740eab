// KServeService's answers about the node's state (readiness, the repository index,
// statistics, load), read from the workers' published status.
#include <algorithm>
#include <cstring>

#include "config/scheduler_config.h"
#include "hookhost/frontend/kserve_service.h"
#include "shm/node_load.h"
#include "shm/status.h"

namespace ferry::frontend {

using nlohmann::json;

namespace {

std::string ModelState(const shm::ModelStatusData& m) {
  return std::string(m.name, strnlen(m.name, sizeof(m.name)));
}

// A readiness probe waits this long for a worker's status to settle: 16 quick attempts
// answered a ready node 503 on a busy host. A status torn for longer counts as not ready.
constexpr int64_t kProbePatienceNs = 20'000'000;

Result<shm::StatusSnapshotData> ProbeStatus(const shm::Segment& segment, uint32_t slot) {
  return shm::ReadSettledStatus(segment, slot, kProbePatienceNs);
}

}  // namespace

const hookhost::HookModel* KServeService::Find(std::string_view name,
                                               std::string_view version) const {
  // A version as a model key writes it: decimal, no leading zero ("02" names none).
  int64_t asked = 0;
  if (!version.empty()) {
    std::string key = "v/" + std::string(version.substr(0, 32));
    if (!IsValidModelKey(key)) {
      return nullptr;
    }
    asked = ModelKeyVersion(key);
  }
  const hookhost::HookModel* found = nullptr;
  for (const hookhost::HookModel& m : models_) {
    if (m.name != name || m.unloaded) {
      continue;
    }
    if (asked != 0) {
      if (m.version == asked) {
        return &m;
      }
      continue;
    }
    // Newest loaded first; a failed version only when no version loaded.
    bool better = found == nullptr || (found->failure && !m.failure) ||
                  (!found->failure == !m.failure && m.version > found->version);
    if (better) {
      found = &m;
    }
  }
  return found;
}

std::vector<std::string> KServeService::Versions(std::string_view name) const {
  std::vector<int64_t> versions;
  for (const hookhost::HookModel& m : models_) {
    if (m.name == name && !m.unloaded && m.version > 0) {
      versions.push_back(m.version);
    }
  }
  std::sort(versions.begin(), versions.end());
  std::vector<std::string> out;
  for (int64_t v : versions) {
    out.push_back(std::to_string(v));
  }
  return out;
}

bool KServeService::ModelReady(const hookhost::HookModel& model) const {
  if (model.failure || Stopping()) {
    return false;
  }
  // Announced to be unloaded (ferryctl unload with a drain notice): still served, not ready.
  if (model.index < 64 && (segment_.leaving_models().load() >> model.index & 1) != 0) {
    return false;
  }
  if (model.pipeline()) {  // Ready when every model it calls is.
    return std::all_of(model.calls.begin(), model.calls.end(),
                       [&](uint32_t callee) { return ModelReady(models_[callee]); });
  }
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    if (!s.ok() || s->state != static_cast<uint32_t>(shm::ProcessState::kReady)) {
      continue;
    }
    for (uint32_t m = 0; m < s->num_models && m < shm::kMaxStatusModels; ++m) {
      if (ModelState(s->models[m]) == model.key &&
          s->models[m].state == static_cast<uint32_t>(shm::ModelLoadState::kReady)) {
        return true;
      }
    }
  }
  return false;
}

json KServeService::RepositoryIndex(bool ready_only, uint32_t tenant) const {
  json index = json::array();
  for (const hookhost::HookModel& m : models_) {
    if (m.unloaded || (auth_ != nullptr && !auth_->MaySee(tenant, m.name))) {
      continue;
    }
    bool ready = ModelReady(m);
    if (ready_only && !ready) {
      continue;
    }
    json entry = {{"name", m.name}, {"state", ready ? "READY" : "UNAVAILABLE"}};
    if (m.version > 0) {
      entry["version"] = std::to_string(m.version);
    }
    if (!ready) {
      entry["reason"] = m.failure    ? m.failure->message
                        : Stopping() ? "the node or this hook host is draining"
                                     : "no worker serves it now";
    }
    index.push_back(entry);
  }
  return index;
}

json KServeService::LoadJson() const {
  std::vector<shm::WorkerLoad> workers;
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    workers.push_back(shm::LoadOfWorker(w, s.ok() ? &*s : nullptr));
  }
  shm::NodeLoad load = shm::ComputeNodeLoad(std::move(workers), Stopping());
  json out = {{"state", load.state}, {"weight", load.weight}, {"workers", json::array()}};
  for (const shm::WorkerLoad& w : load.workers) {
    out["workers"].push_back({{"index", w.index},
                              {"ready", w.ready},
                              {"outstanding", w.outstanding},
                              {"queued", w.queued}});
  }
  return out;
}

Result<std::vector<ModelStatistics>> KServeService::Statistics(std::string_view name,
                                                               std::string_view version,
                                                               uint32_t tenant) const {
  std::vector<const hookhost::HookModel*> chosen;
  if (name.empty()) {
    for (const hookhost::HookModel& m : models_) {
      if (!m.unloaded && !m.failure && (auth_ == nullptr || auth_->MaySee(tenant, m.name))) {
        chosen.push_back(&m);
      }
    }
  } else {
    if (Find(name) == nullptr) {
      return NotFound("unknown model '" + std::string(name.substr(0, 128)) + "'");
    }
    for (const hookhost::HookModel& m : models_) {  // Every version, or the one asked for.
      if (m.name == name && !m.unloaded &&
          (version.empty() || (!m.failure && version == std::to_string(m.version)))) {
        chosen.push_back(&m);
      }
    }
    if (chosen.empty()) {
      return NotFound("model '" + std::string(name) + "' has no version '" +
                      std::string(version.substr(0, 32)) + "' that loaded");
    }
  }
  std::vector<shm::StatusSnapshotData> workers;
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    if (s.ok()) {
      workers.push_back(std::move(*s));
    }
  }
  std::vector<ModelStatistics> out;
  for (const hookhost::HookModel* m : chosen) {
    std::string v = m->version > 0 ? std::to_string(m->version) : "";
    out.push_back(SumModelStatistics(m->key, m->name, v, workers));
  }
  return out;
}

bool KServeService::ServerReady() const {
  if (Stopping()) {
    return false;
  }
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    if (s.ok() && s->state == static_cast<uint32_t>(shm::ProcessState::kReady)) {
      return true;
    }
  }
  return false;
}

}  // namespace ferry::frontend
