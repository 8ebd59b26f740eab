// The repository extension's load and unload, asked of a hook host by a client and carried
// out here ([frontend] model_control): each hook host's mailbox (shm/repository_mailbox.h)
// is read every tick; a change is answered once it is done (the model ready on a worker, or
// failed on all; every other hook host restarted with the new table), and the asking hook
// host is restarted right after its answer, so the client's next request meets the new table.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "config/scheduler_config.h"
#include "shm/repository_mailbox.h"
#include "shm/status.h"
#include "supervisor/supervisor_impl.h"

namespace ferry::supervisor {

namespace {

const char* OpName(shm::RepositoryOp op) {
  return op == shm::RepositoryOp::kLoad ? "load" : "unload";
}

}  // namespace

std::optional<size_t> Supervisor::Impl::HookhostChild(uint32_t hookhost) const {
  for (size_t i = 0; i < children.size(); ++i) {
    if (!children[i].worker && children[i].index == hookhost) {
      return i;
    }
  }
  return std::nullopt;
}

uint32_t Supervisor::Impl::IndexOf(const std::string& model) const {
  return static_cast<uint32_t>(std::find(model_table.begin(), model_table.end(), model) -
                               model_table.begin());
}

bool Supervisor::Impl::HeldForRepositoryAnswer(size_t child) const {
  return repository_change && HookhostChild(repository_change->hookhost) == child;
}

void Supervisor::Impl::TakeRepositoryRequests(int64_t now) {
  repository_seen.resize(segment->hookhosts(), 0);
  for (uint32_t h = 0; h < segment->hookhosts(); ++h) {
    shm::RepositoryMailboxData& box =
        segment->frontend_counters(segment->HookhostSlot(h)).repository;
    uint32_t sequence = 0;
    auto taken = shm::TakeRepositoryRequest(box, &repository_seen[h], &sequence);
    if (!taken) {
      continue;
    }
    auto answer = [&](const Status& status) {
      if (sequence != 0) {
        shm::PostRepositoryAnswer(box, sequence, status, 0);
      }
    };
    if (!taken->ok()) {
      spdlog::warn("hook host {}: a malformed repository request: {}", h, taken->error().message);
      answer(taken->error());
      continue;
    }
    const shm::RepositoryRequest& r = **taken;
    if (!config.frontend.model_control) {
      answer(PermissionDenied("model control is off on this node ([frontend] model_control)"));
      continue;
    }
    if (repository_change) {
      answer(Unavailable("another repository change (" +
                         std::string(OpName(repository_change->op)) + " '" +
                         repository_change->model + "') is in progress; retry"));
      continue;
    }
    // Triton answers a load of a loaded model OK once it is ready: only what changed in its
    // directory (versions its policy now selects or drops) and a new batch cap apply, and the
    // answer waits for its versions as a load's does.
    Result<json> started =
        r.op == shm::RepositoryOp::kUnload ? UnloadModel(r.model) : ApplyModel(r.model);
    if (!started.ok()) {
      answer(started.error());
      continue;
    }
    spdlog::info("repository: {} '{}' asked of hook host {}", OpName(r.op), r.model, h);
    repository_change = RepositoryChange{h,
                                         sequence,
                                         r.op,
                                         r.model,
                                         started->value("indices", std::vector<uint32_t>()),
                                         r.max_batch_size,
                                         now + kRepositoryWaitNs};
  }
}

std::optional<Status> Supervisor::Impl::RepositoryChangeOutcome() const {
  const RepositoryChange& change = *repository_change;
  if (change.op == shm::RepositoryOp::kUnload) {
    return Leaving(change.model) ? std::nullopt : std::optional<Status>(OkStatus());
  }
  // Done when each of its keys is: the first error, else OK once all are ready.
  for (uint32_t index : change.indices) {
    std::optional<Status> one = LoadOutcome(index);
    if (!one || !one->ok()) {
      return one;
    }
  }
  return OkStatus();
}

bool Supervisor::Impl::Leaving(const std::string& model) const {
  return std::any_of(pending_unloads.begin(), pending_unloads.end(), [&](const PendingUnload& p) {
    return p.name == model || ModelKeyName(p.name) == model;
  });
}

std::optional<Status> Supervisor::Impl::LoadOutcome(uint32_t index) const {
  if (index >= model_table.size()) {
    return Internal("model index " + std::to_string(index) + " left the table");
  }
  const std::string& key = model_table[index];
  if (key == "-") {
    return Unavailable("model index " + std::to_string(index) + " was unloaded while it loaded");
  }
  size_t workers = 0;
  size_t failed = 0;
  std::string why;
  for (const Child& c : children) {
    if (!c.worker || !c.ready() || !c.status) {
      continue;
    }
    ++workers;
    const shm::StatusSnapshotData& s = *c.status;
    // The load's own index only: a worker may still report an older index of the same name.
    if (index < s.num_models && index < shm::kMaxStatusModels) {
      const shm::ModelStatusData& model = s.models[index];
      if (std::string_view(model.name, strnlen(model.name, sizeof(model.name))) != key) {
        continue;
      }
      if (model.state == static_cast<uint32_t>(shm::ModelLoadState::kReady) ||
          model.state == static_cast<uint32_t>(shm::ModelLoadState::kPipeline)) {
        return OkStatus();
      }
      if (model.state == static_cast<uint32_t>(shm::ModelLoadState::kFailed)) {
        ++failed;
        why = std::string(model.error, strnlen(model.error, sizeof(model.error)));
      }
    }
  }
  if (workers > 0 && failed == workers) {
    return Error{ErrorCode::kInvalidArgument, "load '" + key + "' failed: " + why};
  }
  return std::nullopt;
}

void Supervisor::Impl::AnswerRepositoryChange(int64_t now) {
  if (!repository_change) {
    return;
  }
  const RepositoryChange& change = *repository_change;
  std::optional<size_t> asker = HookhostChild(change.hookhost);
  shm::RepositoryMailboxData& box =
      segment->frontend_counters(segment->HookhostSlot(change.hookhost)).repository;
  if (!asker || !children[*asker].running()) {
    repository_change.reset();  // Its client is gone with it.
    return;
  }
  if (phase != Phase::kRunning) {
    shm::PostRepositoryAnswer(box, change.sequence, Unavailable("the node is stopping"), 0);
    repository_change.reset();
    return;
  }
  std::optional<Status> outcome = RepositoryChangeOutcome();
  // The others restart with the new table before the answer: every hook host but the asker
  // serves it when the client hears "done".
  bool others = std::all_of(refresh_queue.begin(), refresh_queue.end(),
                            [&](size_t i) { return i == *asker; }) &&
                (!refresh_current || *refresh_current == *asker);
  if (now > change.deadline) {
    outcome = Unavailable(std::string(OpName(change.op)) + " '" + change.model + "' not done " +
                          std::to_string(kRepositoryWaitNs / 1'000'000'000) +
                          " s after it was asked; ferryctl status shows where it stands");
  } else if (!outcome || (outcome->ok() && !others)) {
    return;
  }
  if (outcome->ok() && change.max_batch_size > 0) {
    // The load's config override: kept (a worker that restarts gets it) and sent now.
    for (uint32_t index : change.indices) {
      const std::string& key = model_table[index];
      if (key == "-") {
        continue;
      }
      batch_overrides[key] = change.max_batch_size;
      (void)SendToModel(key, shm::ControlCode::kSetMaxBatchSize, 0,
                        static_cast<int32_t>(change.max_batch_size));
    }
  }
  bool refreshes =
      std::find(refresh_queue.begin(), refresh_queue.end(), *asker) != refresh_queue.end();
  shm::PostRepositoryAnswer(box, change.sequence, *outcome,
                            refreshes ? shm::kRepositoryRefreshes : 0);
  spdlog::info("repository: {} '{}' answered {}", OpName(change.op), change.model,
               outcome->ok() ? std::string("OK") : outcome->error().ToString());
  repository_change.reset();  // The asker's own restart follows (RefreshHookhosts).
}

}  // namespace ferry::supervisor
