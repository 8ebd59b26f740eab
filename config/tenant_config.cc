#include "config/tenant_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "config/config_file.h"
#include "config/scheduler_config.h"

namespace ferry {

bool TenantSettings::MayCall(std::string_view model) const {
  return std::any_of(models.begin(), models.end(),
                     [&](const std::string& m) { return m == "*" || m == model; });
}

void ReadTenants(TableReader& r, const std::string& base_dir,
                 std::vector<TenantSettings>* tenants) {
  for (auto& [name, t] : r.NamedTables()) {
    TenantSettings tenant;
    tenant.name = name;
    if (!IsValidModelName(name)) {
      r.ErrorAt(name, "'" + name.substr(0, 64) +
                          "' is not a tenant name (letters, digits, '_', '-', '.'; at most 128 "
                          "bytes)");
    }
    if (!t.StringArray("models", &tenant.models)) {
      t.ErrorAt("models", "missing: the models this tenant may call (\"*\" for every model)");
    }
    for (const std::string& m : tenant.models) {
      bool all = m == "*" && tenant.models.size() == 1;
      if (!all && !IsValidModelName(m)) {
        t.ErrorAt("models", "'" + m.substr(0, 64) +
                                "' is not a model name (\"*\" stands alone, for every model)");
      }
    }
    if (t.String("keys_file", &tenant.keys_file)) {
      if (tenant.keys_file.empty()) {
        t.ErrorAt("keys_file", "must not be empty");
      } else if (std::filesystem::path(tenant.keys_file).is_relative() && !base_dir.empty()) {
        tenant.keys_file =
            (std::filesystem::path(base_dir) / tenant.keys_file).lexically_normal().string();
      }
    }
    t.Double("weight", &tenant.weight, DoubleRange{0, 1e12, true, false});
    t.Bool("admin", &tenant.admin);
    t.Int("max_queued", &tenant.max_queued, 1, int64_t{1} << 30);
    if (t.Double("rate", &tenant.rate, DoubleRange{0, 1e9, true, false})) {
      tenant.burst = std::max(1.0, tenant.rate);
    }
    if (t.Double("burst", &tenant.burst, DoubleRange{1, 1e9, false, false}) && tenant.rate == 0) {
      t.ErrorAt("burst", "needs rate (requests per second)");
    }
    if (t.StringArray("tls_subjects", &tenant.tls_subjects)) {
      for (const std::string& subject : tenant.tls_subjects) {
        if (subject.empty() || subject.size() > 1024) {
          t.ErrorAt("tls_subjects", "a subject is 1 to 1024 bytes, as \"CN=alice,O=Acme\"");
        }
      }
    }
    t.Finish();
    tenants->push_back(std::move(tenant));
  }
  // A certificate maps to exactly one tenant.
  for (size_t i = 0; i < tenants->size(); ++i) {
    for (size_t j = i + 1; j < tenants->size(); ++j) {
      for (const std::string& subject : (*tenants)[i].tls_subjects) {
        const std::vector<std::string>& other = (*tenants)[j].tls_subjects;
        if (std::find(other.begin(), other.end(), subject) != other.end()) {
          r.ErrorAt((*tenants)[j].name, "tls_subjects: '" + subject.substr(0, 128) +
                                            "' is also tenant '" + (*tenants)[i].name + "'");
        }
      }
    }
  }
}

void ReadPriorities(TableReader& r, SchedulerConfig* scheduler) {
  for (auto& [name, p] : r.NamedTables()) {
    if (!IsValidModelName(name)) {
      r.ErrorAt(name, "'" + name.substr(0, 64) + "' is not a class name");
    }
    int64_t level = 0;
    if (!p.Int("level", &level, 1, 3)) {
      p.ErrorAt("level", "missing: the priority level this class names, 1 (most urgent) to 3");
    } else if (!scheduler->priority_names[static_cast<size_t>(level)].empty()) {
      p.ErrorAt("level", "level " + std::to_string(level) + " is already class '" +
                             scheduler->priority_names[static_cast<size_t>(level)] + "'");
    } else {
      scheduler->priority_names[static_cast<size_t>(level)] = name;
    }
    double ms = 0;
    if (p.Double("max_wait_ms", &ms, {0, 3.6e6, true, false}) && level >= 1 && level <= 3) {
      scheduler->max_wait_seconds[static_cast<size_t>(level)] = ms / 1000;
    }
    p.Finish();
  }
}

void ReadAuth(TableReader& r, AuthSettings* auth) {
  r.Bool("required", &auth->required);
  std::vector<std::string> open;
  if (r.StringArray("open_endpoints", &open)) {
    auth->open_endpoints = 0;
    for (const std::string& e : open) {
      if (e == "health") {
        auth->open_endpoints |= kOpenHealth;
      } else if (e == "metadata") {
        auth->open_endpoints |= kOpenMetadata;
      } else if (e == "statistics") {
        auth->open_endpoints |= kOpenStatistics;
      } else {
        r.ErrorAt("open_endpoints", "unknown endpoint class '" + e.substr(0, 32) +
                                        "' (expected health, metadata, statistics)");
      }
    }
  }
  r.Finish();
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ParseDigest(std::string_view line, KeyDigest* out) {
  constexpr std::string_view kPrefix = "sha256:";
  if (line.size() != kPrefix.size() + 64 || line.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (size_t i = 0; i < 32; ++i) {
    int hi = HexValue(line[kPrefix.size() + 2 * i]);
    int lo = HexValue(line[kPrefix.size() + 2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return false;
    }
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

Result<std::vector<KeyDigest>> ReadKeysFile(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string text,
                         ReadConfigFile(path, "keys file", kMaxKeysFileBytes, true));
  std::vector<KeyDigest> keys;
  std::string_view rest(text);
  for (size_t line = 1; !rest.empty(); ++line) {
    size_t end = rest.find('\n');
    std::string_view l = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) {
      l.remove_suffix(1);
    }
    if (l.empty() || l[0] == '#') {
      continue;
    }
    KeyDigest digest{};
    if (!ParseDigest(l, &digest)) {
      return InvalidArgument("keys file " + path + ":" + std::to_string(line) +
                             ": expected \"sha256:\" and 64 hex digits (the digest of a key, "
                             "never the key itself)");
    }
    if (keys.size() == kMaxKeysPerFile) {
      return InvalidArgument("keys file " + path + " holds more than " +
                             std::to_string(kMaxKeysPerFile) + " keys");
    }
    keys.push_back(digest);
  }
  return keys;
}

}  // namespace ferry
