// The node's client shared-memory regions (Triton's system shared-memory extension): the
// registry, and the server end of each hook host's region socket (shm/client_region_wire.h).
//
// A client registers a POSIX shared-memory object it made (its key, an offset and a size)
// under a name, through any hook host; then names the region in infer requests sent to any
// hook host. The registry is node-wide, so it lives here: ferryd opens the object once, at
// registration (the name's later fate does not change the region), and hands the descriptor
// to a hook host for each request that names it. A sandboxed hook host opens no file itself.
//
// Rules (each refused with a clear error): the extension off unless [frontend]
// system_shared_memory; at most kMaxTenantRegions regions a tenant and kMaxClientRegions a
// node; a key that is not a plain shared-memory name, or is one of ferry's own; an object that
// is not a regular file (a FIFO, a directory, a link: never followed, never waited on);
// offset + byte_size past the object's size or overflowing; a name the tenant has registered
// already. Regions are keyed by (tenant, name): a region is its registering tenant's, others
// neither see nor use nor unregister it, and may use the same name for their own. The object
// is opened for reading and writing when ferryd may, else read-only (outputs then refused).
//
// Thread safety: Attach, size and the destructor from any thread. The broker's own thread
// serves the sockets, alone adds, reads and closes them (a socket is never closed under a
// request being served on it), and alone calls Handle (a descriptor it sends is never closed
// under it); tests call Handle on a broker whose thread was not started. A hook host that
// sends a malformed packet or stops reading its replies is dropped, never waited on.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "shm/client_region_wire.h"

namespace ferry::supervisor {

class RegionBroker {
 public:
  // `enabled`: [frontend] system_shared_memory. `directory`: where POSIX shared-memory objects
  // live (/dev/shm; a test's own directory).
  RegionBroker(bool enabled, std::string directory = "/dev/shm");
  ~RegionBroker();
  RegionBroker(const RegionBroker&) = delete;
  RegionBroker& operator=(const RegionBroker&) = delete;

  // Starts the broker's thread.
  Status Start();
  // `fd`: ferryd's end of hook host `slot`'s new socket, owned from here (the slot's previous
  // socket, if any, is closed).
  void Attach(uint32_t slot, int fd);

  // One request (`bytes` received) and its reply; `fds`: the descriptors to send with it
  // (owned by the broker: not to be closed by the caller, and valid only until the next
  // Handle). Called by the broker's thread; public for tests, which call it on a broker
  // whose thread was not started.
  shm::RegionReply Handle(const shm::RegionRequest& request, size_t bytes, std::vector<int>* fds);
  size_t size() const;

 private:
  struct Region {
    shm::RegionEntry entry;
    int fd = -1;
  };
  Status Register(const shm::RegionEntry& entry, uint32_t tenant);
  // `name` if `tenant` registered it (another tenant's region is as good as absent to it).
  // REQUIRES: mu_ held.
  using Regions = std::map<std::pair<uint32_t, std::string>, Region>;  // By tenant, name.
  Regions::const_iterator Find(const std::string& name, uint32_t tenant) const;
  // INVALID_ARGUMENT when the tenant has `name` already, RESOURCE_EXHAUSTED past the bounds.
  Status Room(const std::string& name, uint32_t tenant) const;
  static bool WellFormed(const shm::RegionRequest& request, size_t bytes);
  Status Unregister(const shm::RegionRequest& request);
  void Describe(const shm::RegionRequest& request, shm::RegionReply* reply) const;
  void Open(const shm::RegionRequest& request, shm::RegionReply* reply, std::vector<int>* fds);
  void Serve();
  void ServeOne(int fd);
  void Drop(int fd);
  void Wake();
  // The broker's thread: the sockets attached since, each replacing its slot's; false when
  // stopping.
  bool TakeAttached();

  const bool enabled_;
  const std::string directory_;
  mutable std::mutex mu_;
  Regions regions_;  // Guarded by mu_ (changed only by the broker's thread).
  std::vector<std::pair<uint32_t, int>> attached_;  // Not yet taken. Guarded by mu_.
  bool stopping_ = false;                           // Guarded by mu_.
  std::map<uint32_t, int> sockets_;  // By hook host slot. The broker's thread's only.
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // An eventfd: the destructor stops the thread.
  std::thread thread_;
};

}  // namespace ferry::supervisor
