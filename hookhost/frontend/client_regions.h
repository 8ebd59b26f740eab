// The system shared-memory extension in a hook host: the client end of its region socket to
// ferryd's broker (supervisor/region_broker.h, which holds the node's registry), and the
// reading of inputs from, and writing of outputs into, the regions a request names.
//
// A request names a region per tensor with Triton's parameters shared_memory_region,
// shared_memory_offset (default 0) and shared_memory_byte_size. For each request the hook host
// asks ferryd for the regions' descriptors (one round trip on the region socket), reads each
// input with pread into the request's own storage (a region truncated under it gives a short
// read, refused; never a SIGBUS from a mapping), and writes each output with pwrite once the
// answer is ready, after asking again (so a region unregistered while the request ran is
// refused, not written). A descriptor is closed as soon as the request is done with it.
//
// Thread safety: every method from any thread (calls on the socket are serialized).
// Lifetime: owns the socket.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "hookhost/hookhost.h"
#include "shm/client_region_wire.h"

namespace ferry::frontend {

// A tensor's place in a registered region, as the request names it.
struct SharedTensor {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

struct RegionStatus {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// Triton's answer to registering CUDA shared memory: refused until the GPU path runs.
inline constexpr const char* kCudaSharedMemoryRefusal =
    "CUDA shared memory is not supported by this node: register system shared memory "
    "(/v2/systemsharedmemory) instead";

class ClientRegions {
 public:
  // `socket`: the hook host's end of its region socket (--region-fd), owned from here.
  // `reply_wait_ms`: how long a call waits for ferryd's answer (UNAVAILABLE after).
  explicit ClientRegions(int socket, int reply_wait_ms = 5000);
  ~ClientRegions();
  ClientRegions(const ClientRegions&) = delete;
  ClientRegions& operator=(const ClientRegions&) = delete;

  // `tenant`: the caller's (0: anonymous); each region is its registering tenant's alone.
  Status Register(const std::string& name, const std::string& key, uint64_t offset,
                  uint64_t byte_size, uint32_t tenant);
  // `name` empty: every region of the tenant's.
  Status Unregister(const std::string& name, uint32_t tenant);
  // `name` empty: every region of the tenant's; else the one (NOT_FOUND when not registered).
  Result<std::vector<RegionStatus>> Describe(const std::string& name, uint32_t tenant);

  // Each of `inputs` (an index into request.inputs and its place) read into a new block of
  // `storage`, its span pointing there. INVALID_ARGUMENT for a place past its region, a size
  // other than its tensor's, a region shorter than registered; NOT_FOUND for a region not
  // registered (for `tenant`, the caller's as authenticated). At most kMaxClientRegions places.
  Status ReadInputs(const std::vector<std::pair<size_t, SharedTensor>>& inputs, uint32_t tenant,
                    hookhost::InferRequest* request, std::vector<std::vector<uint8_t>>* storage);
  // `tensor` written at `place`: INVALID_ARGUMENT when it does not fit or the region is
  // read-only; NOT_FOUND when the region is no longer registered.
  Status WriteOutputs(
      const std::vector<std::pair<const hookhost::ResponseTensor*, SharedTensor>>& outputs,
      uint32_t tenant);

 private:
  struct Opened {
    shm::RegionEntry entry;
    int fd;
  };
  // One call: `request` sent, its reply received; `opened` (kOpen) the descriptors in order.
  Result<std::unique_ptr<shm::RegionReply>> Call(shm::RegionRequest& request,
                                                 std::vector<int>* opened = nullptr);
  // The regions named (distinct), each with a descriptor the caller closes (CloseAll).
  Result<std::vector<Opened>> Open(const std::vector<const SharedTensor*>& places, uint32_t tenant);
  static void CloseAll(std::vector<Opened>& opened);
  // The region `place` names among `opened`, with `place` checked against its size.
  static Result<const Opened*> Locate(const std::vector<Opened>& opened, const SharedTensor& place);

  std::mutex mu_;
  int socket_;
  const int reply_wait_ms_;
  uint32_t sequence_ = 0;  // The last call's. Guarded by mu_.
};

}  // namespace ferry::frontend
