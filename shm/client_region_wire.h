// The system shared-memory extension's wire between a hook host and ferryd's region broker
// (supervisor/region_broker.h): one SOCK_SEQPACKET socket pair per hook host, made by ferryd
// when it starts the hook host. A sandboxed hook host opens no file, so ferryd opens each
// client region when it is registered and hands the descriptor over (SCM_RIGHTS) for each
// request that reads or writes it.
//
// One request packet, one reply packet, in order. Everything received is hostile on both
// sides: a packet of the wrong size, an unknown operation, a count past its bound, a name or
// key that is not one, descriptors where none belong (closed) are refused, never trusted.
//
// Thread safety: pure functions over caller-owned buffers and descriptors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ferry::shm {

// Regions a node holds at once (and the regions one infer request may name), and one tenant.
inline constexpr uint32_t kMaxClientRegions = 64;
inline constexpr uint32_t kMaxTenantRegions = 16;
inline constexpr size_t kMaxRegionNameBytes = 127;
inline constexpr size_t kMaxRegionKeyBytes = 255;

enum class RegionOp : uint32_t { kRegister = 1, kUnregister = 2, kStatus = 3, kOpen = 4 };

// One region as registered (Triton's fields), or a name to look up (the rest zero).
struct RegionEntry {
  char name[kMaxRegionNameBytes + 1];
  char key[kMaxRegionKeyBytes + 1];
  uint64_t offset;
  uint64_t byte_size;
  uint32_t writable;  // ferryd could open it for writing (outputs may go there).
  uint32_t tenant;    // The registering tenant's number (0: anonymous); only it may use it.
};

// Register: one entry. Unregister / Status: one entry naming a region, or none for all.
// Open: the entries to open, by name.
// `tenant`: the caller's (0: anonymous); a region is seen, used and unregistered only by the
// tenant that registered it. `sequence`: echoed by the reply (a reply to an earlier request,
// late past its wait, is told apart and dropped).
struct RegionRequest {
  uint32_t op;
  uint32_t count;
  uint32_t tenant;
  uint32_t sequence;
  RegionEntry entries[kMaxClientRegions];
};

// code: 0 ok, else 1 + ErrorCode. Status and Open: `count` entries; Open: one descriptor per
// entry, in order.
struct RegionReply {
  uint32_t code;
  uint32_t count;
  uint32_t sequence;
  uint32_t reserved;
  char message[512];
  RegionEntry entries[kMaxClientRegions];
};

// Triton's region name: 1..127 bytes of [A-Za-z0-9_.-].
bool IsRegionName(std::string_view name);
// A POSIX shared-memory object's name as clients give it: "/" then 1..254 bytes of
// [A-Za-z0-9_.-], not "." or "..", and not ferry's own objects (names starting "ferry").
// INVALID_ARGUMENT saying which rule it breaks.
Status CheckRegionKey(std::string_view key);

RegionEntry MakeEntry(std::string_view name, std::string_view key = {}, uint64_t offset = 0,
                      uint64_t byte_size = 0);
// The entry's name and key as strings; INVALID_ARGUMENT when either is not NUL-terminated.
Result<std::string> EntryName(const RegionEntry& entry);
Result<std::string> EntryKey(const RegionEntry& entry);

// The bytes of a request or reply with `count` entries.
size_t RequestBytes(uint32_t count);
size_t ReplyBytes(uint32_t count);

// Sends `bytes` of `data` as one packet with `fds` attached (at most kMaxClientRegions).
// `flags`: sendmsg's (MSG_DONTWAIT: never wait for a peer that does not read). INTERNAL, or
// UNAVAILABLE (the peer gone, or its queue full under MSG_DONTWAIT).
Status SendPacket(int socket, const void* data, size_t bytes, const std::vector<int>& fds = {},
                  int flags = 0);
// Receives one packet into `data` (capacity `bytes`): its size, and the descriptors that came
// with it in `fds` (owned by the caller from here). A packet larger than `bytes` or with
// truncated control data is refused and every descriptor it carried closed. `flags`: recvmsg's
// (MSG_DONTWAIT: 0 when nothing is waiting; a packet of no bytes reads as the peer gone).
// UNAVAILABLE when the peer is gone.
Result<size_t> ReceivePacket(int socket, void* data, size_t bytes, std::vector<int>* fds,
                             int flags = 0);

// The reply's error (code != 0) as an Error, or OkStatus.
Status ReplyStatus(const RegionReply& reply);
void SetReplyError(RegionReply& reply, const Error& error);

}  // namespace ferry::shm
