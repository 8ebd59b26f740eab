#include "net/open_connections.h"

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

}  // namespace ferry::net
