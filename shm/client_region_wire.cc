#include "shm/client_region_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace ferry::shm {
namespace {

bool PortableChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool AllPortable(std::string_view s) { return std::all_of(s.begin(), s.end(), PortableChar); }

Result<std::string> Terminated(const char* field, size_t capacity, std::string_view what) {
  const void* end = std::memchr(field, '\0', capacity);
  if (end == nullptr) {
    return InvalidArgument(std::string(what) + " is not terminated");
  }
  return std::string(field, static_cast<const char*>(end) - field);
}

void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) {
    close(fd);
  }
  fds->clear();
}

}  // namespace

bool IsRegionName(std::string_view name) {
  return !name.empty() && name.size() <= kMaxRegionNameBytes && AllPortable(name);
}

Status CheckRegionKey(std::string_view key) {
  if (key.size() < 2 || key.size() > kMaxRegionKeyBytes || key.front() != '/') {
    return InvalidArgument("a shared-memory key is '/' and 1 to 254 characters (shm_open's name)");
  }
  std::string_view rest = key.substr(1);
  if (!AllPortable(rest) || rest == "." || rest == "..") {
    return InvalidArgument(
        "a shared-memory key may hold only letters, digits, '_', '.' and '-'"
        " after its '/'");
  }
  if (rest.starts_with("ferry")) {
    return InvalidArgument("shared-memory objects named ferry* are the node's own");
  }
  return OkStatus();
}

RegionEntry MakeEntry(std::string_view name, std::string_view key, uint64_t offset,
                      uint64_t byte_size) {
  RegionEntry e{};
  // copy_n, not memcpy: an empty view's data() may be null, which memcpy may not be given.
  std::copy_n(name.data(), std::min(name.size(), kMaxRegionNameBytes), e.name);
  std::copy_n(key.data(), std::min(key.size(), kMaxRegionKeyBytes), e.key);
  e.offset = offset;
  e.byte_size = byte_size;
  return e;
}

Result<std::string> EntryName(const RegionEntry& entry) {
  return Terminated(entry.name, sizeof entry.name, "a region's name");
}

Result<std::string> EntryKey(const RegionEntry& entry) {
  return Terminated(entry.key, sizeof entry.key, "a region's key");
}

size_t RequestBytes(uint32_t count) {
  return offsetof(RegionRequest, entries) + sizeof(RegionEntry) * count;
}

size_t ReplyBytes(uint32_t count) {
  return offsetof(RegionReply, entries) + sizeof(RegionEntry) * count;
}

Status SendPacket(int socket, const void* data, size_t bytes, const std::vector<int>& fds,
                  int flags) {
  if (fds.size() > kMaxClientRegions) {
    return Internal("too many descriptors for one packet");
  }
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxClientRegions)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do {
    sent = sendmsg(socket, &msg, flags | MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    return errno == EPIPE || errno == ECONNRESET || errno == EAGAIN
               ? Unavailable("the region socket's peer is gone or not reading")
               : Internal(std::string("sendmsg (regions): ") + std::strerror(errno));
  }
  return OkStatus();
}

Result<size_t> ReceivePacket(int socket, void* data, size_t bytes, std::vector<int>* fds,
                             int flags) {
  fds->clear();
  iovec iov{data, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxClientRegions)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = recvmsg(socket, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    return errno == EAGAIN ? Result<size_t>(size_t{0})
                           : Internal(std::string("recvmsg (regions): ") + std::strerror(errno));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds->push_back(fd);
      }
    }
  }
  if (got == 0) {
    CloseAll(fds);
    return Unavailable("the region broker's peer is gone");
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    CloseAll(fds);
    return InvalidArgument("a region packet larger than its kind allows");
  }
  return static_cast<size_t>(got);
}

Status ReplyStatus(const RegionReply& reply) {
  if (reply.code == 0) {
    return OkStatus();
  }
  ErrorCode code = reply.code - 1 <= static_cast<uint32_t>(kLastErrorCode)
                       ? static_cast<ErrorCode>(reply.code - 1)
                       : ErrorCode::kInternal;
  Result<std::string> message = Terminated(reply.message, sizeof reply.message, "a message");
  return Error{code, message.ok() ? std::move(*message) : "(an unterminated message)"};
}

void SetReplyError(RegionReply& reply, const Error& error) {
  reply.code = static_cast<uint32_t>(error.code) + 1;
  reply.count = 0;
  std::memset(reply.message, 0, sizeof reply.message);
  std::memcpy(reply.message, error.message.data(),
              std::min(error.message.size(), sizeof reply.message - 1));
}

}  // namespace ferry::shm
