#include "net/open_connections.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>

namespace ferry::net {
namespace {

// The inode `fd` names, or 0 when it is closed.
ino_t InodeOf(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

}  // namespace

void OpenConnections::Add(int fd) {
  // A reused number: the connection it named before is gone.
  std::erase_if(open_, [fd](const auto& c) { return c.first == fd; });
  open_.emplace_back(fd, InodeOf(fd));
}

bool OpenConnections::AtLeast(size_t limit) { return open_.size() >= limit && Count() >= limit; }

size_t OpenConnections::Count() {
  std::erase_if(open_, [](const auto& c) { return InodeOf(c.first) != c.second; });
  return open_.size();
}

int OpenConnections::Idlest(uint32_t min_idle_ms) {
  Count();
  int idlest = -1;
  uint32_t longest = 0;
  for (const auto& [fd, inode] : open_) {
    tcp_info info{};
    socklen_t length = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) {
      continue;
    }
    uint32_t idle = std::min(info.tcpi_last_data_recv, info.tcpi_last_data_sent);
    if (idle >= min_idle_ms && idle >= longest) {
      longest = idle;
      idlest = fd;
    }
  }
  // Still the socket it was a moment ago (gRPC may close it at any time, and the number be
  // reused): the one just found is looked up again.
  if (idlest >= 0) {
    auto it = std::find_if(open_.begin(), open_.end(),
                           [idlest](const auto& c) { return c.first == idlest; });
    if (it == open_.end() || InodeOf(idlest) != it->second) {
      return -1;
    }
  }
  return idlest;
}

}  // namespace ferry::net
