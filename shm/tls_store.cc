#include "shm/tls_store.h"

#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>
#include <new>

namespace ferry::shm {

namespace bip = boost::interprocess;

Result<TlsStore> TlsStore::Create(const std::string& segment) {
  std::string name = ObjectName(segment);
  bip::shared_memory_object::remove(name.c_str());
  try {
    bip::permissions mode(0600);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, mode);
    object.truncate(sizeof(TlsStoreData));
    TlsStore store;
    store.region_ = bip::mapped_region(object, bip::read_write);
    store.data_ = new (store.region_.get_address()) TlsStoreData{};
    return store;
  } catch (const bip::interprocess_exception& e) {
    return Internal("cannot create the TLS store '" + name + "': " + e.what());
  }
}

Result<TlsStore> TlsStore::Open(const std::string& segment) {
  std::string name = ObjectName(segment);
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_only);
    bip::offset_t size = 0;
    if (!object.get_size(size) || static_cast<size_t>(size) != sizeof(TlsStoreData)) {
      return InvalidArgument("the TLS store '" + name + "' has " + std::to_string(size) +
                             " bytes, not " + std::to_string(sizeof(TlsStoreData)));
    }
    TlsStore store;
    store.region_ = bip::mapped_region(object, bip::read_only);
    store.data_ = static_cast<TlsStoreData*>(store.region_.get_address());
    return store;
  } catch (const bip::interprocess_exception& e) {
    return NotFound("no TLS store '" + name + "': " + e.what());
  }
}

void TlsStore::Remove(const std::string& segment) {
  bip::shared_memory_object::remove(ObjectName(segment).c_str());
}

Status TlsStore::Publish(const TlsPems& pems) {
  size_t total = pems.cert_chain.size() + pems.key.size() + pems.client_ca.size();
  if (total > kMaxTlsBytes) {
    return InvalidArgument("the TLS certificate, key and client CA hold " + std::to_string(total) +
                           " bytes; at most " + std::to_string(kMaxTlsBytes));
  }
  TlsStoreData& d = *data_;
  uint64_t sequence = d.sequence.load(std::memory_order_relaxed) & ~uint64_t{1};
  d.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  d.cert_bytes = static_cast<uint32_t>(pems.cert_chain.size());
  d.key_bytes = static_cast<uint32_t>(pems.key.size());
  d.ca_bytes = static_cast<uint32_t>(pems.client_ca.size());
  char* at = d.text;
  for (const std::string* part : {&pems.cert_chain, &pems.key, &pems.client_ca}) {
    std::memcpy(at, part->data(), part->size());
    at += part->size();
  }
  d.sequence.store(sequence + 2, std::memory_order_release);
  return OkStatus();
}

Result<TlsPems> TlsStore::Read(int attempts) const {
  const TlsStoreData& d = *data_;
  for (int i = 0; i < attempts; ++i) {
    uint64_t before = d.sequence.load(std::memory_order_acquire);
    if (before == 0) {
      return Unavailable("no TLS certificate has been published yet");
    }
    if ((before & 1) != 0) {
      continue;
    }
    // Clamped: whatever the sizes say, the copies stay inside the text.
    size_t cert = std::min<size_t>(d.cert_bytes, kMaxTlsBytes);
    size_t key = std::min<size_t>(d.key_bytes, kMaxTlsBytes - cert);
    size_t ca = std::min<size_t>(d.ca_bytes, kMaxTlsBytes - cert - key);
    TlsPems out;
    out.cert_chain.assign(d.text, cert);
    out.key.assign(d.text + cert, key);
    out.client_ca.assign(d.text + cert + key, ca);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (d.sequence.load(std::memory_order_relaxed) == before) {
      out.sequence = before;
      return out;
    }
  }
  return Unavailable("the TLS store kept changing while read");
}

}  // namespace ferry::shm
