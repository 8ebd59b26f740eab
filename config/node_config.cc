#include "config/node_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include "config/scheduler_config_reader.h"
#include "config/toml_reader.h"

extern char** environ;

namespace ferry {
namespace {

constexpr std::string_view kEnvPrefix = "FERRY_SCHEDULER_";

// The [scheduler] keys that hold strings; the rest are numbers.
bool IsStringSchedulerKey(std::string_view key) {
  return key == "discipline" || key == "residency_mode" || key == "batch_sizing";
}

const std::vector<std::string>& SchedulerKeys() {
  static const std::vector<std::string> keys = {
      "discipline",     "ema_halflife_seconds", "recency_penalty_cap",      "coalescing_discount",
      "cost_ema_alpha", "max_queue_depth",      "dispatch_timeout_seconds", "compaction_interval",
      "residency_mode", "batch_sizing",         "lower_level_share"};
  return keys;
}

// FERRY_SCHEDULER_<KEY>=value, checked by the same reader as the file.
void ApplyEnvironment(const Environment& env, SchedulerConfig* c, Diagnostics* diagnostics) {
  for (const auto& [variable, value] : env) {
    if (variable.rfind(kEnvPrefix, 0) != 0) {
      continue;
    }
    std::string source = "environment " + variable;
    std::string key = variable.substr(kEnvPrefix.size());
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    if (std::find(SchedulerKeys().begin(), SchedulerKeys().end(), key) == SchedulerKeys().end()) {
      std::string hint = NearestKey(key, SchedulerKeys());
      std::string suggestion;
      if (!hint.empty()) {
        std::string upper = hint;
        std::transform(upper.begin(), upper.end(), upper.begin(),
                       [](unsigned char ch) { return std::toupper(ch); });
        suggestion = "; did you mean " + std::string(kEnvPrefix) + upper + "?";
      }
      diagnostics->Add({source, 0, 0, "scheduler." + key, "no such scheduler key" + suggestion});
      continue;
    }
    if (value.empty() || value.find_first_of("\n\r#") != std::string::npos) {
      diagnostics->Add(
          {source, 0, 0, "scheduler." + key, "value must be one line, non-empty, without '#'"});
      continue;
    }
    std::string toml_value = value;
    if (IsStringSchedulerKey(key)) {
      toml_value = "\"";
      for (char ch : value) {
        if (ch == '"' || ch == '\\') {
          toml_value += '\\';
        }
        toml_value += ch;
      }
      toml_value += "\"";
    }
    // Positions inside the generated one-line document mean nothing to the operator.
    Diagnostics local;
    std::optional<toml::table> table = ParseToml(key + " = " + toml_value, source, &local);
    if (table) {
      TableReader reader(*table, "scheduler", source, &local);
      ReadSchedulerKeys(reader, c);
      reader.Finish();
    }
    for (Diagnostic d : local.items()) {
      d.line = 0;
      d.column = 0;
      if (d.key_path.empty()) {
        d.key_path = "scheduler." + key;
        d.message = "not a valid value '" + value + "'";
      }
      diagnostics->Add(std::move(d));
    }
  }
}

// The reason a listen address is refused, or the address.
Result<ListenAddress> ParseListen(const std::string& text) {
  const std::string kForm = "expected HOST:PORT with PORT in [0, 65535]";
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument(kForm);
  }
  if (colon == 0) {
    return InvalidArgument("the host is empty (" + kForm + "; 0.0.0.0 for every interface)");
  }
  std::string host = text.substr(0, colon);
  bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) {
    host = host.substr(1, host.size() - 2);  // [::1]:8000
  }
  // An IPv4 or IPv6 literal or a DNS name; an IPv6 literal needs brackets ("[::1]:8000").
  in6_addr v6{};
  in_addr v4{};
  bool name = host.size() <= 253 && std::all_of(host.begin(), host.end(), [](unsigned char ch) {
                return std::isalnum(ch) || ch == '-' || ch == '.';
              });
  bool valid = bracketed ? inet_pton(AF_INET6, host.c_str(), &v6) == 1
                         : inet_pton(AF_INET, host.c_str(), &v4) == 1 || name;
  if (!valid) {
    return InvalidArgument(kForm);
  }
  std::string_view port_text = std::string_view(text).substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535 ||
      port_text.empty()) {
    return InvalidArgument(kForm);
  }
  return ListenAddress{host, static_cast<uint16_t>(port)};
}

// A size in bytes and how the messages name it.
struct ByteBound {
  uint64_t bytes;
  const char* text;
};

// `key` as bytes: an integer or a string like "512MiB", within [min, max]; a mistake is
// recorded at the key and *out left as it was.
void ReadByteSize(TableReader& r, std::string_view key, ByteBound min, ByteBound max,
                  uint64_t* out) {
  const toml::node* node = r.Raw(key);
  if (node == nullptr) {
    return;
  }
  Result<uint64_t> size =
      InvalidArgument("expected bytes as an integer or a string like \"512MiB\", got " +
                      std::string(TomlTypeName(*node)));
  if (node->is_integer()) {
    int64_t bytes = node->as_integer()->get();
    size = bytes < 0 ? Result<uint64_t>(InvalidArgument("must not be negative"))
                     : Result<uint64_t>(static_cast<uint64_t>(bytes));
  } else if (node->is_string()) {
    size = ParseByteSize(node->as_string()->get());
  }
  if (!size.ok()) {
    r.ErrorAt(key, size.error().message);
  } else if (*size < min.bytes) {
    r.ErrorAt(key, std::string("must be at least ") + min.text + ", got " + std::to_string(*size) +
                       " bytes");
  } else if (*size > max.bytes) {
    r.ErrorAt(key, std::string("must be at most ") + max.text + ", got " + std::to_string(*size) +
                       " bytes");
  } else {
    *out = *size;
  }
}

void ReadDevices(TableReader& r, DeviceSelection* d) {
  const toml::node* node = r.Raw("devices");
  if (node == nullptr) {
    return;
  }
  const std::string kExpected = "expected \"all\", \"cpu:N\" or a list of GPU ids like [0, 1]";
  if (node->is_string()) {
    std::string text = node->as_string()->get();
    if (text == "all") {
      d->kind = DeviceSelection::Kind::kAllGpus;
      return;
    }
    if (text.rfind("cpu:", 0) == 0) {
      std::string_view count = std::string_view(text).substr(4);
      int64_t n = 0;
      auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), n);
      if (ec == std::errc() && end == count.data() + count.size() && n >= 1 && n <= kMaxWorkers) {
        d->kind = DeviceSelection::Kind::kCpu;
        d->cpu_workers = n;
        return;
      }
      r.ErrorAt("devices", "'" + text + "': N in cpu:N must be an integer in [1, " +
                               std::to_string(kMaxWorkers) + "]");
      return;
    }
    r.ErrorAt("devices", "'" + text + "': " + kExpected);
    return;
  }
  if (node->is_array()) {
    std::vector<int64_t> ids;
    if (!r.IntArray("devices", &ids, 0, 1023)) {
      return;
    }
    if (ids.empty()) {
      r.ErrorAt("devices", "the list of GPU ids is empty");
      return;
    }
    if (static_cast<int64_t>(ids.size()) > kMaxWorkers) {
      r.ErrorAt("devices", std::to_string(ids.size()) + " GPU ids, more than the " +
                               std::to_string(kMaxWorkers) + " workers a node holds");
      return;
    }
    std::vector<int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      r.ErrorAt("devices", "a GPU id appears twice");
      return;
    }
    d->kind = DeviceSelection::Kind::kGpuList;
    d->gpu_ids = ids;
    return;
  }
  r.ErrorAt("devices", kExpected + ", got " + std::string(TomlTypeName(*node)));
}

// A path of the node file, relative to its directory.
std::string Resolve(const std::string& base_dir, const std::string& path) {
  if (std::filesystem::path(path).is_relative() && !base_dir.empty()) {
    return (std::filesystem::path(base_dir) / path).lexically_normal().string();
  }
  return path;
}

// [node.listen] tls_cert, tls_key, tls_client_ca: the certificate and key together or
// neither; a client CA only with them.
void ReadTls(TableReader& listen, const std::string& base_dir, TlsSettings* tls) {
  for (auto [key, path] : {std::pair<const char*, std::string*>{"tls_cert", &tls->cert},
                           {"tls_key", &tls->key},
                           {"tls_client_ca", &tls->client_ca}}) {
    if (listen.String(key, path)) {
      if (path->empty()) {
        listen.ErrorAt(key, "must not be empty");
      }
      *path = Resolve(base_dir, *path);
    }
  }
  if (tls->cert.empty() != tls->key.empty()) {
    listen.ErrorAt(tls->cert.empty() ? "tls_key" : "tls_cert",
                   "tls_cert and tls_key go together: the certificate and its private key");
  } else if (!tls->client_ca.empty() && tls->cert.empty()) {
    listen.ErrorAt("tls_client_ca", "needs tls_cert and tls_key (mutual TLS is TLS first)");
  }
}

void ReadNode(TableReader& r, const std::string& base_dir, NodeSettings* n) {
  if (r.String("name", &n->name)) {
    bool valid = !n->name.empty() && n->name.size() <= 64 &&
                 std::all_of(n->name.begin(), n->name.end(), [](unsigned char ch) {
                   return std::isalnum(ch) || ch == '-' || ch == '_';
                 });
    if (!valid) {
      r.ErrorAt("name", "'" + n->name + "': use 1 to 64 letters, digits, '-' or '_'");
    }
  }
  ReadDevices(r, &n->devices);
  r.Enum<BackendKind>("backend", &n->backend,
                      {{"auto", BackendKind::kAuto}, {"sim", BackendKind::kSim}});
  r.Int("hookhosts", &n->hookhosts, 1, kMaxHookhosts);
  if (auto listen = r.Table("listen")) {
    for (auto [key, address] : {std::pair<const char*, ListenAddress*>{"http", &n->http},
                                {"grpc", &n->grpc},
                                {"metrics", &n->metrics}}) {
      std::string text;
      if (!listen->String(key, &text)) {
        continue;
      }
      if (Result<ListenAddress> parsed = ParseListen(text); parsed.ok()) {
        *address = *parsed;
      } else {
        listen->ErrorAt(key, "'" + text + "': " + parsed.error().message);
      }
    }
    std::string agent;
    if (listen->String("agent", &agent)) {
      if (Result<ListenAddress> parsed = ParseListen(agent); parsed.ok()) {
        n->agent = *parsed;
      } else {
        listen->ErrorAt("agent", "'" + agent + "': " + parsed.error().message);
      }
    }
    ReadTls(*listen, base_dir, &n->tls);
    listen->Finish();
  }
  std::vector<const ListenAddress*> all = {&n->http, &n->grpc, &n->metrics};
  if (n->agent) {
    all.push_back(&*n->agent);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = i + 1; j < all.size(); ++j) {
      if (all[i]->port != 0 && all[i]->port == all[j]->port && all[i]->host == all[j]->host) {
        r.ErrorAt("listen", "two listeners share " + all[i]->ToString());
      }
    }
  }
  if (r.String("model_repository", &n->model_repository)) {
    if (n->model_repository.empty()) {
      r.ErrorAt("model_repository", "must not be empty");
    } else if (std::filesystem::path(n->model_repository).is_relative() && !base_dir.empty()) {
      n->model_repository =
          (std::filesystem::path(base_dir) / n->model_repository).lexically_normal().string();
    }
  }
  ReadByteSize(r, "shm_size", {uint64_t{1} << 20, "1MiB"}, {kMaxShmSize, "1TiB"}, &n->shm_size);

  r.Finish();
}

void ReadSimCost(TableReader& r, SimModelCost* cost) {
  DoubleRange range{0, 60e6, false, false};  // Up to a minute per dispatch.
  r.Double("fixed_us", &cost->fixed_us, range);
  r.Double("per_row_us", &cost->per_row_us, range);
}

}  // namespace

Result<ListenAddress> ParseListenAddress(const std::string& text) { return ParseListen(text); }

std::string_view GatewayModeName(GatewayMode m) {
  switch (m) {
    case GatewayMode::kRoundRobin:
      return "round_robin";
    case GatewayMode::kLeastOutstanding:
      return "least_outstanding";
    case GatewayMode::kLptPacking:
      return "lpt_packing";
  }
  return "?";
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  std::string_view digits = text;
  size_t split = 0;
  while (split < text.size() && std::isdigit(static_cast<unsigned char>(text[split]))) {
    ++split;
  }
  digits = text.substr(0, split);
  std::string_view unit = text.substr(split);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc()) {
    return InvalidArgument("'" + std::string(text) +
                           "' is not a size: expected digits and a unit such as MiB or GiB");
  }
  int shift = -1;
  if (unit.empty() || unit == "B") {
    shift = 0;
  } else if (unit == "K" || unit == "KiB") {
    shift = 10;
  } else if (unit == "M" || unit == "MiB") {
    shift = 20;
  } else if (unit == "G" || unit == "GiB") {
    shift = 30;
  } else if (unit == "T" || unit == "TiB") {
    shift = 40;
  }
  if (shift < 0) {
    return InvalidArgument("'" + std::string(text) + "': unknown unit '" + std::string(unit) +
                           "' (expected B, KiB, MiB, GiB or TiB)");
  }
  if (shift > 0 && value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return InvalidArgument("'" + std::string(text) + "' is too large");
  }
  return value << shift;
}

static void ReadTrace(TableReader& r, TraceConfig* t) {
  if (r.String("otlp_endpoint", &t->otlp_endpoint) &&
      (t->otlp_endpoint.rfind("http://", 0) != 0 ||
       t->otlp_endpoint.find(':', 7) == std::string::npos ||
       t->otlp_endpoint.find_first_of(" \t\r\n") != std::string::npos)) {
    r.ErrorAt("otlp_endpoint",
              "must be http://HOST:PORT[/PATH] (a collector; https goes through a local one)");
  }
  r.Enum<bool>("level", &t->timestamps, {{"off", false}, {"timestamps", true}});
  r.Int("rate", &t->rate, 1, (1 << 24) - 1);
  r.Int("count", &t->count, -1, (int64_t{1} << 26) - 2);
  r.Finish();
}

static void ReadFrontend(TableReader& r, FrontendSettings* f) {
  int64_t bytes = 0;
  if (r.Int("max_request_bytes", &bytes, 1024, int64_t{16} << 30)) {
    f->max_request_bytes = static_cast<uint64_t>(bytes);
  }
  r.Int("max_connections", &f->max_connections, 1, 65536);
  r.Int("max_streams_per_connection", &f->max_streams_per_connection, 1, 65536);
  r.Int("max_inflate_ratio", &f->max_inflate_ratio, 0, 1'000'000);
  r.Double("request_timeout_seconds", &f->request_timeout_seconds, {0.1, 3600, false, false});
  r.Double("idle_timeout_seconds", &f->idle_timeout_seconds, {0.1, 86'400, false, false});
  r.Bool("model_control", &f->model_control);
  r.Bool("system_shared_memory", &f->system_shared_memory);
  if (r.StringArray("tenants", &f->tenants)) {
    std::set<std::string> seen;
    for (const std::string& tenant : f->tenants) {
      if (!IsValidModelName(tenant) || !seen.insert(tenant).second) {
        r.ErrorAt("tenants", "'" + tenant.substr(0, 64) +
                                 "' is not a tenant name (letters, digits, '_', '-', '.'; "
                                 "at most 128 bytes), or is listed twice");
      }
    }
    if (f->tenants.size() > kMaxTenants) {
      r.ErrorAt("tenants", "at most " + std::to_string(kMaxTenants) + " tenants");
    }
  }
  r.Finish();
}

// Numbers the [tenants.NAME] tables after the [frontend] tenants, and checks that a required
// key can be had.
static void DeclareTenants(TableReader& r, NodeConfig* config) {
  std::vector<std::string>& names = config->frontend.tenants;
  for (const TenantSettings& t : config->tenants) {
    if (std::find(names.begin(), names.end(), t.name) == names.end()) {
      names.push_back(t.name);
    }
  }
  if (names.size() > kMaxTenants) {
    r.ErrorAt("tenants", "at most " + std::to_string(kMaxTenants) +
                             " tenants, [frontend] tenants and [tenants] tables together");
  }
  // The scheduler knows tenants by number: n is names[n - 1].
  for (const TenantSettings& t : config->tenants) {
    auto at = std::find(names.begin(), names.end(), t.name);
    config->scheduler.tenant_weights[static_cast<uint32_t>(at - names.begin()) + 1] = t.weight;
  }
  bool mutual = !config->node.tls.client_ca.empty();
  bool credentials = std::any_of(
      config->tenants.begin(), config->tenants.end(), [mutual](const TenantSettings& t) {
        return !t.keys_file.empty() || (mutual && !t.tls_subjects.empty());
      });
  if (config->auth.required && !credentials) {
    r.ErrorAt("auth",
              "required = true, but no [tenants.NAME] has a keys_file (or tls_subjects with "
              "[node.listen] tls_client_ca): no request could be served");
  }
}

static void ReadSupervisor(TableReader& r, SupervisorSettings* s) {
  if (r.String("control_socket", &s->control_socket) &&
      (s->control_socket.empty() || s->control_socket[0] != '/' ||
       s->control_socket.size() > 107)) {
    // sockaddr_un holds 108 bytes with the terminating NUL.
    r.ErrorAt("control_socket", "must be an absolute path of at most 107 bytes");
  }
  if (r.String("control_group", &s->control_group) &&
      (s->control_group.size() > 32 ||
       s->control_group.find_first_of("/:\n \t") != std::string::npos)) {
    r.ErrorAt("control_group", "not a group name");
  }
  r.Int("restart_backoff_ms", &s->restart_backoff_ms, 1, 600'000);
  r.Int("restart_backoff_max_ms", &s->restart_backoff_max_ms, 1, 3'600'000);
  if (s->restart_backoff_max_ms < s->restart_backoff_ms) {
    r.ErrorAt("restart_backoff_max_ms", "is below restart_backoff_ms");
  }
  r.Int("crash_loop_restarts", &s->crash_loop_restarts, 1, 1000);
  r.Int("crash_loop_window_seconds", &s->crash_loop_window_seconds, 1, 86'400);
  r.Double("drain_timeout_seconds", &s->drain_timeout_seconds, {0, 3600, false, false});
  r.Double("drain_notice_seconds", &s->drain_notice_seconds, {0, 600, false, false});
  r.Double("start_timeout_seconds", &s->start_timeout_seconds, {1, 86'400, false, false});
  r.Finish();
}

Environment SchedulerEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (text.rfind(kEnvPrefix, 0) != 0) {
      continue;
    }
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) {
      continue;
    }
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

Result<NodeConfig> ParseNodeConfig(std::string_view text, const std::string& source,
                                   const std::string& base_dir, const Environment& env) {
  Diagnostics diagnostics;
  NodeConfig config;
  std::optional<toml::table> root = ParseToml(text, source, &diagnostics);
  if (root) {
    TableReader reader(*root, "", source, &diagnostics);
    if (auto node = reader.Table("node")) {
      ReadNode(*node, base_dir, &config.node);
    }
    if (auto scheduler = reader.Table("scheduler")) {
      ReadSchedulerTable(*scheduler, &config.scheduler);
    }
    if (auto gateway = reader.Table("gateway")) {
      gateway->Enum<GatewayMode>("mode", &config.gateway.mode,
                                 {{"round_robin", GatewayMode::kRoundRobin},
                                  {"least_outstanding", GatewayMode::kLeastOutstanding},
                                  {"lpt_packing", GatewayMode::kLptPacking}});
      gateway->Int("stall_ms", &config.gateway.stall_ms, 20, 60'000);
      gateway->Finish();
    }
    if (auto cpu = reader.Table("cpu")) {
      cpu->Int("threads", &config.cpu.threads, 0, 1024);
      cpu->Bool("pin", &config.cpu.pin);
      cpu->Finish();
    }
    if (auto worker = reader.Table("worker")) {
      ReadByteSize(*worker, "weight_budget", {1 << 20, "1MiB"}, {uint64_t{1} << 40, "1TiB"},
                   &config.worker.weight_budget);
      worker->Enum<WorkerSettings::Eviction>(
          "eviction", &config.worker.eviction,
          {{"lru", WorkerSettings::Eviction::kLru}, {"all", WorkerSettings::Eviction::kAll}});
      worker->Double("max_load_fraction", &config.worker.max_load_fraction,
                     {0.0, 1.0, true, false});
      worker->Int("spin_us", &config.worker.spin_us, 0, 10'000);
      worker->Finish();
    }
    if (auto sim = reader.Table("sim")) {
      ReadSimCost(*sim, &config.sim.fallback);
      if (auto models = sim->Table("models")) {
        for (auto& [name, model_reader] : models->NamedTables()) {
          if (!IsValidModelName(name)) {
            models->ErrorAt(name, "not a model name");
            continue;
          }
          SimModelCost cost = config.sim.fallback;
          ReadSimCost(model_reader, &cost);
          model_reader.Finish();
          config.sim.models[name] = cost;
        }
      }
      sim->Finish();
    }
    if (auto frontend = reader.Table("frontend")) {
      ReadFrontend(*frontend, &config.frontend);
    }
    if (auto supervisor = reader.Table("supervisor")) {
      ReadSupervisor(*supervisor, &config.supervisor);
    }
    if (auto priorities = reader.Table("priorities")) {
      ReadPriorities(*priorities, &config.scheduler);
      priorities->Finish();
    }
    if (auto tenants = reader.Table("tenants")) {
      ReadTenants(*tenants, base_dir, &config.tenants);
      tenants->Finish();
    }
    if (auto auth = reader.Table("auth")) {
      ReadAuth(*auth, &config.auth);
    }
    if (auto trace = reader.Table("trace")) {
      ReadTrace(*trace, &config.trace);
    }
    DeclareTenants(reader, &config);
    if (auto hooks = reader.Table("hooks")) {
      hooks->Enum<SandboxMode>("sandbox", &config.hooks.sandbox,
                               {{"strict", SandboxMode::kStrict}, {"off", SandboxMode::kOff}});
      hooks->Int("threads", &config.hooks.threads, 1, 1024);
      hooks->Int("call_timeout_ms", &config.hooks.call_timeout_ms, 1, 600'000);
      hooks->Int("max_plugin_faults", &config.hooks.max_plugin_faults, 1, 1000);
      hooks->Int("max_pending", &config.hooks.max_pending, 1, 1 << 20);
      hooks->Int("spin_us", &config.hooks.spin_us, 0, 10'000);
      ReadByteSize(*hooks, "max_memory", {64 << 20, "64MiB"}, {uint64_t{1} << 40, "1TiB"},
                   &config.hooks.max_memory);
      hooks->Finish();
    }
    reader.Finish();
  }
  ApplyEnvironment(env, &config.scheduler, &diagnostics);
  if (!diagnostics.empty()) {
    return diagnostics.ToError();
  }
  return config;
}

Result<NodeConfig> LoadNodeConfig(const std::string& path, const Environment& env) {
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  if (base_dir.empty()) {
    base_dir = ".";
  }
  return ParseNodeConfig(text, path, base_dir, env);
}

}  // namespace ferry
