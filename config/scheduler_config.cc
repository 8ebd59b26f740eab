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
  return it == models.end() ? ModelSchedulingConfig{} : it->second;
}

}  // namespace ferry
