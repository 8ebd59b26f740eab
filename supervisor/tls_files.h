// ferryd's side of TLS: the [node.listen] tls_cert, tls_key and tls_client_ca files read as
// hostile input (config/config_file.h: regular files only, bounded; the key a secret, mode
// 0600 or ferryd refuses it) and checked by building the context every hook host will build
// (net/tls_context.h), so a key that does not match its certificate stops ferryd's start or
// a reload, never a hook host. The text then goes to the hook hosts through shm/tls_store.h.
//
// Thread safety: a pure function of the files.
#pragma once

#include "common/result.h"
#include "config/node_config.h"
#include "shm/tls_store.h"

namespace ferry::supervisor {

inline constexpr size_t kMaxCertChainBytes = 64 << 10;
inline constexpr size_t kMaxKeyBytes = 16 << 10;
inline constexpr size_t kMaxClientCaBytes = 128 << 10;

// REQUIRES: tls.enabled(). INVALID_ARGUMENT naming the file and what is wrong with it.
Result<shm::TlsPems> ReadTlsFiles(const TlsSettings& tls);

}  // namespace ferry::supervisor
