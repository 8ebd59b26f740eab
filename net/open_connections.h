// The connections a hook host handed to gRPC that are still open, for the gRPC connection
// cap. gRPC closes a connection's descriptor itself and tells nobody, so each connection is
// known by its descriptor and its socket's inode: it is gone once the descriptor is closed or
// names another file (the number reused).
//
// Thread safety: not thread-safe; the gRPC accept thread owns it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace ferry::net {

class OpenConnections {
 public:
  // REQUIRES: `fd` is an open socket.
  void Add(int fd);
  // Whether `limit` or more are still open; forgets the closed ones when it has to look.
  bool AtLeast(size_t limit);
  // How many are still open (forgets the closed ones).
  size_t Count();

 private:
  std::vector<std::pair<int, ino_t>> open_;
};

}  // namespace ferry::net
