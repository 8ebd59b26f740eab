// The control socket's commands, and the status reply.
#include <sys/socket.h>

#include <algorithm>

#include "supervisor/supervisor_impl.h"
#include "supervisor/tenants_report.h"

namespace ferry::supervisor {

Result<json> Supervisor::Impl::SendToModel(const std::string& model, shm::ControlCode code,
                                           double weight, int32_t value) {
  size_t sent = 0;
  size_t found = 0;
  for (const Child& c : children) {
    if (!c.worker || !c.running() || !c.status) {
      continue;
    }
    for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
      if (model ==
          std::string_view(c.status->models[m].name,
                           strnlen(c.status->models[m].name, sizeof(c.status->models[m].name)))) {
        ++found;
        sent += SendControl(c, {code, m, weight, value}) ? 1 : 0;
      }
    }
  }
  if (found == 0) {
    return NotFound("no running worker serves a model named '" + model + "'");
  }
  if (sent < found) {
    return Unavailable("the control ring of " + std::to_string(found - sent) +
                       " worker(s) is full; retry");
  }
  return json{{"workers", sent}};
}

shm::NodeLoad Supervisor::Impl::Load() const {
  std::vector<shm::WorkerLoad> workers;
  for (const Child& c : children) {
    if (c.worker) {
      workers.push_back(shm::LoadOfWorker(c.index, c.running() && c.status ? &*c.status : nullptr));
    }
  }
  return shm::ComputeNodeLoad(std::move(workers), phase != Phase::kRunning);
}

void Supervisor::Impl::AnswerAgentChecks() {
  // Each connection gets its line and is closed at once: nothing is held per connection,
  // so a flood costs an accept, a write and a close each.
  std::string reply = shm::AgentReply(Load());
  for (int i = 0; i < 256; ++i) {
    int fd = accept4(agent_listener->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return;
    }
    (void)!send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
  }
}

json Supervisor::Impl::FailedPluginsJson() const {
  json out = json::array();
  for (const auto& [name, why] : failed_plugins) {
    out.push_back({{"model", name}, {"reason", why}});
  }
  return out;
}

json Supervisor::Impl::StatusJson() const {
  int64_t now = MonotonicNs();
  json children_json = json::array();
  for (const Child& c : children) {
    json entry = {{"kind", c.worker ? "worker" : "hookhost"},
                  {"index", c.index},
                  {"slot", c.slot},
                  {"pid", c.running() ? c.process.pid : 0},
                  {"state", c.running()  ? std::string(shm::ProcessStateName(c.state()))
                            : c.finished ? "exited"
                                         : "restarting"},
                  {"generation", segment->generation(c.slot).load()},
                  {"restarts", c.restarts},
                  {"crash_looping", c.policy.CrashLooping(now)},
                  {"last_exit", c.last_exit},
                  {"heartbeat_age_ms", c.running() ? (now - c.heartbeat_ns) / 1'000'000 : -1}};
    if (c.worker) {
      entry["device"] = c.device.Describe();
      json models = json::array();
      if (c.running() && c.status) {
        for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
          json model = ModelControlJson(c.status->models[m]);
          model["queue_depth"] = c.status->models[m].queue_depth;
          model["outstanding"] = c.status->models[m].outstanding;
          models.push_back(model);
        }
      }
      entry["models"] = models;
    }
    children_json.push_back(entry);
  }
  std::string state = phase != Phase::kRunning ? std::string(PhaseName(phase))
                      : Degraded(now)          ? "degraded"
                      : NodeReady()            ? "ready"
                                               : "starting";
  return {{"node", config.node.name},
          {"state", state},
          {"live", true},
          {"ready", phase == Phase::kRunning && NodeReady()},
          {"model_table", model_table},
          {"failed_plugins", FailedPluginsJson()},
          {"models_changing", refresh_current.has_value() || !refresh_queue.empty()},
          {"segment", segment->name()},
          {"listen",
           {{"http", http ? http->bound() : bound_http},
            {"grpc", grpc ? grpc->bound() : bound_grpc},
            {"metrics", metrics_listener->bound()},
            {"agent", agent_listener ? agent_listener->bound() : ""}}},
          {"pid", getpid()},
          {"children", children_json}};
}

Result<json> Supervisor::Impl::Handle(const control::ControlRequest& request) {
  switch (request.command) {
    case control::Command::kStatus:
      return StatusJson();
    case control::Command::kSchedulerMetrics:
    case control::Command::kControlStatus: {
      json workers = json::array();
      for (const Child& c : children) {
        if (!c.worker) {
          continue;
        }
        json entry = {{"worker", c.index}, {"slot", c.slot}, {"running", c.running()}};
        json models = json::array();
        if (c.running() && c.status) {
          entry.update(WorkerSummaryJson(*c.status));
          for (uint32_t m = 0; m < c.status->num_models && m < shm::kMaxStatusModels; ++m) {
            models.push_back(request.command == control::Command::kSchedulerMetrics
                                 ? ModelMetricsJson(c.status->models[m])
                                 : ModelControlJson(c.status->models[m]));
          }
        }
        entry["models"] = models;
        workers.push_back(entry);
      }
      return json{{"workers", workers}};
    }
    case control::Command::kSetPolicy: {
      FERRY_ASSIGN_OR_RETURN(
          json sent, SendToModel(request.model, shm::ControlCode::kSetPolicy, request.weight, 0));
      weight_overrides[request.model] = request.weight;
      spdlog::info("set_policy: model '{}' weight {}", request.model, request.weight);
      return sent;
    }
    case control::Command::kSetResidency:
      if (config.scheduler.residency_mode != ResidencyMode::kExternal) {
        return InvalidArgument(
            "set_residency needs scheduler.residency_mode = \"external\"; this node manages "
            "residency itself");
      }
      return SendToModel(request.model, shm::ControlCode::kSetResidency, 0,
                         static_cast<int32_t>(request.residency));
    case control::Command::kSetDiscipline: {
      size_t sent = 0;
      for (const Child& c : children) {
        if (c.worker && c.running()) {
          sent += SendControl(c, {shm::ControlCode::kSetDiscipline, 0, 0,
                                  static_cast<int32_t>(request.discipline)})
                      ? 1
                      : 0;
        }
      }
      discipline_override = request.discipline;
      spdlog::info("set_discipline: {}", DisciplineName(request.discipline));
      return json{{"workers", sent}};
    }
    case control::Command::kCompact: {
      size_t sent = 0;
      for (const Child& c : children) {
        if (c.worker && c.running()) {
          sent += SendControl(c, {shm::ControlCode::kCompact, 0, 0, 0}) ? 1 : 0;
        }
      }
      return json{{"workers", sent}};
    }
    case control::Command::kTenants: {
      std::vector<const shm::StatusSnapshotData*> workers;
      for (const Child& c : children) {
        if (c.worker && c.running() && c.status) {
          workers.push_back(&*c.status);
        }
      }
      return TenantsReport(config, tenant_weight_overrides, *segment, workers);
    }
    case control::Command::kSetTenant:
      return SetTenantWeight(request.tenant, request.weight);
    case control::Command::kReload:
      return Reload();
    case control::Command::kDrain:
      BeginShutdown("ferryctl drain", MonotonicNs());
      return json{{"state", std::string(PhaseName(phase))}};
    case control::Command::kLoad:
      return LoadModel(request.model);
    case control::Command::kUnload:
      return UnloadModel(request.model);
  }
  return Internal("unhandled command");
}

Result<json> Supervisor::Impl::SetTenantWeight(const std::string& tenant, double weight) {
  const std::vector<std::string>& names = config.frontend.tenants;
  auto at = std::find(names.begin(), names.end(), tenant);
  if (at == names.end()) {
    return NotFound("set_tenant: no tenant '" + tenant + "' (the node file declares them)");
  }
  auto number = static_cast<int32_t>(at - names.begin()) + 1;
  size_t sent = 0;
  for (const Child& c : children) {
    if (c.worker && c.running()) {
      sent += SendControl(c, {shm::ControlCode::kSetTenantWeight, 0, weight, number}) ? 1 : 0;
    }
  }
  tenant_weight_overrides[static_cast<uint32_t>(number)] = weight;
  spdlog::info("set_tenant: tenant '{}' weight {}", tenant, weight);
  return json{{"workers", sent}};
}

}  // namespace ferry::supervisor
