#include "supervisor/api_keys.h"

#include <algorithm>
#include <map>

namespace ferry::supervisor {

Result<std::vector<shm::KeyEntry>> CollectKeys(const NodeConfig& config) {
  const std::vector<std::string>& names = config.frontend.tenants;
  std::vector<shm::KeyEntry> keys;
  std::map<KeyDigest, std::string> owner;
  for (const TenantSettings& t : config.tenants) {
    if (t.keys_file.empty()) {
      continue;
    }
    auto index =
        static_cast<uint32_t>(std::find(names.begin(), names.end(), t.name) - names.begin()) + 1;
    FERRY_ASSIGN_OR_RETURN(std::vector<KeyDigest> digests, ReadKeysFile(t.keys_file));
    for (const KeyDigest& d : digests) {
      auto [it, fresh] = owner.emplace(d, t.name);
      if (!fresh && it->second != t.name) {
        return InvalidArgument("a key digest in " + t.keys_file + " is also tenant '" + it->second +
                               "''s: a key maps to exactly one tenant");
      }
      if (fresh) {
        keys.push_back({d, index});
      }
    }
  }
  if (keys.size() > shm::kMaxKeys) {
    return InvalidArgument("the keys files hold " + std::to_string(keys.size()) +
                           " keys; a node holds at most " + std::to_string(shm::kMaxKeys));
  }
  return keys;
}

}  // namespace ferry::supervisor
