#include "config/scheduler_config.h"

#include <algorithm>
#include <cctype>

namespace ferry {

bool IsValidModelName(std::string_view name) {
  // The first character is a letter, digit or '_': never ".", "..", "-" (an unloaded index in
  // ferryd's model table) or an option-like "-x".
  return !name.empty() && name.size() <= 128 &&
         (std::isalnum(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
         std::all_of(name.begin(), name.end(), [](unsigned char ch) {
           return std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.';
         });
}

bool IsValidModelKey(std::string_view key) {
  size_t slash = key.find('/');
  if (slash == std::string_view::npos) {
    return IsValidModelName(key);
  }
  std::string_view version = key.substr(slash + 1);
  return key.size() <= 128 && IsValidModelName(key.substr(0, slash)) && !version.empty() &&
         version.size() <= 18 && version[0] != '0' &&
         std::all_of(version.begin(), version.end(),
                     [](unsigned char ch) { return std::isdigit(ch) != 0; });
}

std::string_view ModelKeyName(std::string_view key) { return key.substr(0, key.find('/')); }

int64_t ModelKeyVersion(std::string_view key) {
  size_t slash = key.find('/');
  int64_t version = 0;
  if (slash != std::string_view::npos) {
    for (char ch : key.substr(slash + 1)) {
      version = version * 10 + (ch - '0');
    }
  }
  return version;
}

std::string_view DisciplineName(Discipline d) {
  switch (d) {
    case Discipline::kFair:
      return "fair";
    case Discipline::kFifo:
      return "fifo";
    case Discipline::kEdf:
      return "edf";
  }
  return "?";
}

std::string_view ResidencyName(Residency r) {
  switch (r) {
    case Residency::kPinned:
      return "pinned";
    case Residency::kWarm:
      return "warm";
    case Residency::kOnDemand:
      return "on_demand";
  }
  return "?";
}

std::string_view ResidencyModeName(ResidencyMode m) {
  return m == ResidencyMode::kManaged ? "managed" : "external";
}

std::string_view BatchSizingName(BatchSizing b) {
  return b == BatchSizing::kLargest ? "largest" : "cost";
}

ModelSchedulingConfig SchedulerConfig::ForModel(const std::string& name) const {
  auto it = models.find(name);
  if (it == models.end()) {
    it = models.find(std::string(ModelKeyName(name)));
  }
  return it == models.end() ? ModelSchedulingConfig{} : it->second;
}

}  // namespace ferry
