// The node's API keys for the shared key table (shm/key_table.h): every [tenants.NAME]
// keys_file read (config/tenant_config.h ReadKeysFile) and each digest numbered with its
// tenant. ferryd collects them at start (any error: it does not start) and on reload (any
// error: the node keeps the keys it has).
//
// Thread safety: a pure function of the config and the files it reads.
#pragma once

#include <vector>

#include "common/result.h"
#include "config/node_config.h"
#include "shm/key_table.h"

namespace ferry::supervisor {

// INVALID_ARGUMENT naming the file for a refused keys file, the tenants for a digest listed
// under two of them (a key maps to exactly one tenant), or more than shm::kMaxKeys keys.
Result<std::vector<shm::KeyEntry>> CollectKeys(const NodeConfig& config);

}  // namespace ferry::supervisor
