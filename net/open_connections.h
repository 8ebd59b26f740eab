// The connections a hook host handed to gRPC that are still open, for the gRPC connection
// cap. gRPC closes a connection's descriptor itself and tells nobody, so each connection is
// known by its descriptor and its socket's inode: it is gone once the descriptor is closed or
// names another file (the number reused).
//
// At the cap, the connection idle longest can make room for a newcomer (Idlest, then
// shutdown(2) on it: gRPC sees the end and closes it), as the HTTP server does.
//
// Thread safety: not thread-safe; the gRPC accept thread owns it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
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
  // The open connection whose socket has neither received nor sent data for the longest, at
  // least `min_idle_ms` (the kernel's TCP_INFO: last_data_recv, last_data_sent); -1 when none
  // has been idle that long. A connection waiting on a long call is idle too: keep
  // `min_idle_ms` above the usual call.
  int Idlest(uint32_t min_idle_ms);

 private:
  std::vector<std::pair<int, ino_t>> open_;
};

}  // namespace ferry::net
