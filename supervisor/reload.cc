// Reload of the node file, and the hook host refreshes that follow a change of the node's
// model table (model_loading.cc changes it).
#include <algorithm>

#include "common/clock.h"
#include "shm/key_table.h"
#include "supervisor/api_keys.h"
#include "supervisor/supervisor_impl.h"

namespace ferry::supervisor {

namespace {

// The node-file changes a reload cannot apply to running processes.
std::vector<std::string> RestartNeeded(const NodeConfig& a, const NodeConfig& b) {
  std::vector<std::string> out;
  const NodeSettings& x = a.node;
  const NodeSettings& y = b.node;
  auto check = [&](bool same, const char* key) {
    if (!same) {
      out.push_back(key);
    }
  };
  check(x.name == y.name, "node.name");
  check(x.devices.kind == y.devices.kind && x.devices.gpu_ids == y.devices.gpu_ids &&
            x.devices.cpu_workers == y.devices.cpu_workers,
        "node.devices");
  check(x.backend == y.backend, "node.backend");
  check(x.hookhosts == y.hookhosts, "node.hookhosts");
  check(x.http.ToString() == y.http.ToString() && x.grpc.ToString() == y.grpc.ToString() &&
            x.metrics.ToString() == y.metrics.ToString(),
        "node.listen");
  // A relay in each hook host or none, and whether it asks for client certificates.
  check(x.tls.enabled() == y.tls.enabled() && x.tls.client_ca.empty() == y.tls.client_ca.empty(),
        "node.listen tls");
  check(x.model_repository == y.model_repository, "node.model_repository");
  check(x.shm_size == y.shm_size, "node.shm_size");
  check(a.supervisor.control_socket == b.supervisor.control_socket &&
            a.supervisor.control_group == b.supervisor.control_group,
        "supervisor.control_socket/control_group");
  check(a.gateway.mode == b.gateway.mode, "gateway.mode");
  check(a.frontend.max_request_bytes == b.frontend.max_request_bytes &&
            a.frontend.max_connections == b.frontend.max_connections &&
            a.frontend.request_timeout_seconds == b.frontend.request_timeout_seconds &&
            a.frontend.idle_timeout_seconds == b.frontend.idle_timeout_seconds &&
            a.frontend.tenants == b.frontend.tenants &&
            a.frontend.model_control == b.frontend.model_control,
        "frontend");
  check(a.hooks.sandbox == b.hooks.sandbox && a.hooks.threads == b.hooks.threads &&
            a.hooks.call_timeout_ms == b.hooks.call_timeout_ms &&
            a.hooks.max_pending == b.hooks.max_pending && a.hooks.spin_us == b.hooks.spin_us,
        "hooks");
  check(a.cpu.threads == b.cpu.threads && a.cpu.pin == b.cpu.pin, "cpu");
  check(a.trace.otlp_endpoint == b.trace.otlp_endpoint &&
            a.trace.timestamps == b.trace.timestamps && a.trace.rate == b.trace.rate &&
            a.trace.count == b.trace.count,
        "trace");
  check(a.auth.required == b.auth.required && a.auth.open_endpoints == b.auth.open_endpoints,
        "auth");
  check(std::equal(a.tenants.begin(), a.tenants.end(), b.tenants.begin(), b.tenants.end(),
                   [](const TenantSettings& x, const TenantSettings& y) {
                     // The hook hosts read these at start (auth.h, tenant_limits.h).
                     return x.name == y.name && x.models == y.models &&
                            x.tls_subjects == y.tls_subjects && x.max_queued == y.max_queued &&
                            x.rate == y.rate && x.burst == y.burst && x.admin == y.admin;
                   }),
        "tenants");
  const SchedulerConfig& s = a.scheduler;
  const SchedulerConfig& t = b.scheduler;
  check(s.max_wait_seconds == t.max_wait_seconds && s.priority_names == t.priority_names,
        "priorities");
  check(s.ema_halflife_seconds == t.ema_halflife_seconds &&
            s.recency_penalty_cap == t.recency_penalty_cap &&
            s.coalescing_discount == t.coalescing_discount &&
            s.cost_ema_alpha == t.cost_ema_alpha &&
            s.dispatch_timeout_seconds == t.dispatch_timeout_seconds &&
            s.compaction_interval == t.compaction_interval &&
            s.residency_mode == t.residency_mode && s.batch_sizing == t.batch_sizing,
        "scheduler (keys other than discipline, max_queue_depth and models' weight and "
        "max_batch_size)");
  std::vector<std::string> models;
  for (const auto& [name, m] : s.models) {
    models.push_back(name);
  }
  for (const auto& [name, m] : t.models) {
    models.push_back(name);
  }
  for (const std::string& name : models) {
    auto p = s.models.find(name);
    auto q = t.models.find(name);
    ModelSchedulingConfig none;
    const ModelSchedulingConfig& m = p == s.models.end() ? none : p->second;
    const ModelSchedulingConfig& n = q == t.models.end() ? none : q->second;
    // Managed mode applies a new floor live (Reload); external mode's controller owns it.
    if (m.residency != n.residency && s.residency_mode == ResidencyMode::kExternal) {
      out.push_back("scheduler.models." + name + ".residency");
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double WeightOf(const SchedulerConfig& config, const std::string& model) {
  return config.ForModel(model).weight;
}

Residency ResidencyOf(const SchedulerConfig& config, const std::string& model) {
  return config.ForModel(model).residency;
}

std::optional<int64_t> CapOf(const SchedulerConfig& config, const std::string& model) {
  return config.ForModel(model).max_batch_size;
}

}  // namespace

size_t Supervisor::Impl::SendTableChange(const shm::ControlMessage& message) {
  size_t sent = 0;
  for (Child& c : children) {
    if (!c.worker || !c.running()) {
      continue;  // A worker (re)starting now gets the new table on its command line.
    }
    if (SendControl(c, message)) {
      ++sent;
    } else {
      Kill(c, "its control ring was full during a model table change");
    }
  }
  return sent;
}

void Supervisor::Impl::QueueHookhostRefresh() {
  for (size_t i = 0; i < children.size(); ++i) {
    if (!children[i].worker &&
        std::find(refresh_queue.begin(), refresh_queue.end(), i) == refresh_queue.end()) {
      refresh_queue.push_back(i);
    }
  }
}

void Supervisor::Impl::RefreshHookhosts(int64_t now) {
  if (phase != Phase::kRunning) {
    refresh_queue.clear();
    refresh_current.reset();
    return;
  }
  if (refresh_current) {
    Child& c = children[*refresh_current];
    int64_t limit = static_cast<int64_t>(config.supervisor.drain_timeout_seconds * 1e9);
    if (c.refreshing && c.running() && now - c.refresh_since > limit && c.kill_reason.empty()) {
      Kill(c, "not drained " + std::to_string(limit / 1'000'000'000) +
                  " s after a model table change");
    }
    if (c.refreshing || !c.ready()) {
      return;  // Still draining, or its successor not ready yet: one at a time.
    }
    refresh_current.reset();
  }
  while (!refresh_queue.empty()) {
    size_t next = refresh_queue.front();
    if (HeldForRepositoryAnswer(next)) {
      if (refresh_queue.size() == 1) {
        return;  // It drains once its client has the answer.
      }
      refresh_queue.pop_front();
      refresh_queue.push_back(next);
      continue;
    }
    refresh_queue.pop_front();
    Child& c = children[next];
    if (!c.running()) {
      continue;  // It starts with the new table anyway.
    }
    if (SendControl(c, {shm::ControlCode::kDrain, 0, 0, 0})) {
      c.refreshing = true;
      c.refresh_since = now;
    } else {
      Kill(c, "its control ring was full during a model table change");
    }
    refresh_current = next;
    return;
  }
}

Status Supervisor::Impl::ReloadKeys(const NodeConfig& loaded, json* applied) {
  // The tenants the keys are numbered by are the running hook hosts': a change of tenants
  // waits for a restart, and so do their keys.
  if (loaded.frontend.tenants != config.frontend.tenants) {
    return OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<shm::KeyEntry> keys, CollectKeys(loaded));
  Result<shm::KeySnapshot> current = shm::ReadKeys(segment->keys());
  if (!current.ok() || current->keys != keys) {
    FERRY_RETURN_IF_ERROR(shm::PublishKeys(segment->keys(), keys));
    applied->push_back("API keys: " + std::to_string(keys.size()));
  }
  for (size_t t = 0; t < config.tenants.size() && t < loaded.tenants.size(); ++t) {
    config.tenants[t].keys_file = loaded.tenants[t].keys_file;
  }
  return OkStatus();
}

Status Supervisor::Impl::ReloadTls(const NodeConfig& loaded, json* applied) {
  if (!tls || !loaded.node.tls.enabled()) {
    return OkStatus();  // Turning TLS on or off waits for a restart (RestartNeeded).
  }
  FERRY_ASSIGN_OR_RETURN(shm::TlsPems pems, ReadTlsFiles(loaded.node.tls));
  Result<shm::TlsPems> current = tls->Read();
  bool same = current.ok() && current->cert_chain == pems.cert_chain && current->key == pems.key &&
              current->client_ca == pems.client_ca;
  if (!same) {
    FERRY_RETURN_IF_ERROR(tls->Publish(pems));
    applied->push_back("TLS certificate: " + loaded.node.tls.cert);
  }
  config.node.tls.cert = loaded.node.tls.cert;
  config.node.tls.key = loaded.node.tls.key;
  config.node.tls.client_ca = loaded.node.tls.client_ca;
  return OkStatus();
}

void Supervisor::Impl::ReloadModelSettings(const SchedulerConfig& loaded, json* applied) {
  std::map<std::string, bool> names;
  for (const auto& [name, m] : config.scheduler.models) {
    names[name] = true;
  }
  for (const auto& [name, m] : loaded.models) {
    names[name] = true;
  }
  // What reaches the workers is per model key: a model's entry changes each version without
  // one of its own (SchedulerConfig::ForModel).
  std::map<std::string, bool> targets = names;
  for (const std::string& key : model_table) {
    if (key != "-") {
      targets[key] = true;
    }
  }
  for (const auto& [name, unused] : targets) {
    std::optional<int64_t> cap_before = CapOf(config.scheduler, name);
    std::optional<int64_t> cap_after = CapOf(loaded, name);
    if (cap_before != cap_after) {
      batch_overrides[name] = cap_after;
      (void)SendToModel(name, shm::ControlCode::kSetMaxBatchSize, 0,
                        static_cast<int32_t>(cap_after.value_or(0)));
      applied->push_back("scheduler.models." + name + ".max_batch_size = " +
                         (cap_after ? std::to_string(*cap_after) : std::string("none")));
    }
  }
  for (const auto& [name, unused] : targets) {
    double before = WeightOf(config.scheduler, name);
    double after = WeightOf(loaded, name);
    if (before != after) {
      weight_overrides[name] = after;
      (void)SendToModel(name, shm::ControlCode::kSetPolicy, after, 0);
      applied->push_back("scheduler.models." + name + ".weight = " + std::to_string(after));
    }
  }
  if (config.scheduler.residency_mode == ResidencyMode::kManaged &&
      loaded.residency_mode == ResidencyMode::kManaged) {
    std::vector<std::pair<std::string, Residency>> floors;  // Taken once all are compared.
    for (const auto& [name, unused] : targets) {
      Residency before = ResidencyOf(config.scheduler, name);
      Residency after = ResidencyOf(loaded, name);
      if (before != after) {
        (void)SendToModel(name, shm::ControlCode::kSetResidencyFloor, 0,
                          static_cast<int32_t>(after));
        floors.emplace_back(name, after);
        applied->push_back("scheduler.models." + name +
                           ".residency = " + std::string(ResidencyName(after)));
      }
    }
    for (const auto& [name, after] : floors) {
      if (names.count(name) != 0) {
        config.scheduler.models[name].residency = after;
      }
    }
  }
  for (const auto& [name, unused] : names) {
    config.scheduler.models[name].weight = WeightOf(loaded, name);
    config.scheduler.models[name].max_batch_size = CapOf(loaded, name);
  }
}

Result<json> Supervisor::Impl::Reload() {
  sd_notify(0, "RELOADING=1");
  Result<NodeConfig> loaded = LoadNodeConfig(options.config_path, SchedulerEnvironment());
  if (!loaded.ok()) {
    spdlog::error("reload refused; the node keeps its configuration:\n{}", loaded.error().message);
    sd_notify(0, "READY=1");
    return InvalidArgument("reload refused, the node keeps its configuration: " +
                           loaded.error().message);
  }
  std::vector<std::string> restart = RestartNeeded(config, *loaded);
  json applied = json::array();
  Status keys = ReloadKeys(*loaded, &applied);
  if (keys.ok()) {
    keys = ReloadTls(*loaded, &applied);
  }
  if (!keys.ok()) {
    spdlog::error("reload refused; the node keeps its configuration: {}", keys.error().message);
    sd_notify(0, "READY=1");
    return InvalidArgument("reload refused, the node keeps its configuration: " +
                           keys.error().message);
  }
  if (loaded->scheduler.discipline != config.scheduler.discipline) {
    discipline_override = loaded->scheduler.discipline;
    for (const Child& c : children) {
      if (c.worker && c.running()) {
        SendControl(c, {shm::ControlCode::kSetDiscipline, 0, 0,
                        static_cast<int32_t>(loaded->scheduler.discipline)});
      }
    }
    applied.push_back("scheduler.discipline = " +
                      std::string(DisciplineName(loaded->scheduler.discipline)));
  }
  for (const TenantSettings& t : loaded->tenants) {
    auto before = std::find_if(config.tenants.begin(), config.tenants.end(),
                               [&](const TenantSettings& x) { return x.name == t.name; });
    if (before != config.tenants.end() && before->weight != t.weight) {
      (void)SetTenantWeight(t.name, t.weight);
      before->weight = t.weight;
      applied.push_back("tenants." + t.name + ".weight = " + std::to_string(t.weight));
    }
  }
  if (loaded->scheduler.max_queue_depth != config.scheduler.max_queue_depth) {
    queue_depth_override = loaded->scheduler.max_queue_depth;
    for (const Child& c : children) {
      if (c.worker && c.running()) {
        SendControl(c, {shm::ControlCode::kSetMaxQueueDepth, 0, 0,
                        static_cast<int32_t>(loaded->scheduler.max_queue_depth)});
      }
    }
    applied.push_back("scheduler.max_queue_depth = " +
                      std::to_string(loaded->scheduler.max_queue_depth));
  }
  ReloadModelSettings(loaded->scheduler, &applied);
  // Only what was applied is taken; the rest stays as started until ferryd restarts.
  config.scheduler.discipline = loaded->scheduler.discipline;
  config.scheduler.max_queue_depth = loaded->scheduler.max_queue_depth;
  for (const std::string& key : restart) {
    spdlog::warn("reload: {} changed; it takes effect when ferryd restarts", key);
  }
  spdlog::info("reloaded {}: {} change(s) applied live, {} need a restart", options.config_path,
               applied.size(), restart.size());
  sd_notify(0, "READY=1");
  return json{{"applied", applied}, {"restart_needed", restart}};
}
}  // namespace ferry::supervisor
