// The node's TLS certificate, key and client CA as PEM text in shared memory. ferryd reads
// the [node.listen] tls_* files (at start and on reload) and publishes them here, in an
// object of their own ("<segment>.tls", mode 0600) that only the hook hosts map, read-only:
// the workers never map the private key. A hook host cannot open the files inside its
// sandbox; it builds its TLS context from the latest text (net/tls_context.h) when the
// sequence moves, so a renewed certificate serves new connections without a restart.
//
// Seqlock, as key_table.h: the writer makes `sequence` odd, writes, makes it even again; a
// reader keeps a copy only when it read the same even sequence before and after. Sizes read
// from the object are clamped to it (the reader trusts nothing it maps).
//
// Thread safety: one writer (ferryd's thread); readers anywhere. Process safety: only
// ferryd's mapping is writable.
#pragma once

#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <string>

#include "common/result.h"

namespace ferry::shm {

inline constexpr size_t kMaxTlsBytes = 256 << 10;  // Certificate chain, key and CA together.

struct TlsStoreData {
  std::atomic<uint64_t> sequence;  // Even: stable; odd: being written. 0: nothing published.
  uint32_t cert_bytes;
  uint32_t key_bytes;
  uint32_t ca_bytes;
  uint32_t reserved;
  char text[kMaxTlsBytes];  // cert, then key, then CA.
};

struct TlsPems {
  std::string cert_chain;
  std::string key;
  std::string client_ca;
  uint64_t sequence = 0;  // The sequence it was read at (Read).
};

class TlsStore {
 public:
  // ferryd: removes a stale object of the name, creates "<segment>.tls" (mode 0600) and maps
  // it read-write. INTERNAL when it cannot.
  static Result<TlsStore> Create(const std::string& segment);
  // A hook host: maps the object read-only (before its sandbox forbids open). NOT_FOUND when
  // ferryd made none (no TLS configured); INVALID_ARGUMENT when its size is not the store's.
  static Result<TlsStore> Open(const std::string& segment);
  static void Remove(const std::string& segment);
  static std::string ObjectName(const std::string& segment) { return segment + ".tls"; }

  // REQUIRES: a writable store. INVALID_ARGUMENT (nothing written) past kMaxTlsBytes.
  Status Publish(const TlsPems& pems);
  // The text as last published. UNAVAILABLE when nothing is published yet or no consistent
  // copy could be read in `attempts` tries.
  Result<TlsPems> Read(int attempts = 1000) const;
  uint64_t sequence() const { return data_->sequence.load(std::memory_order_acquire); }

 private:
  TlsStore() = default;
  boost::interprocess::mapped_region region_;
  TlsStoreData* data_ = nullptr;
};

}  // namespace ferry::shm
