// Test helper: a TCP listening socket on 127.0.0.1, at a port the kernel picks (port 0), so
// that tests running side by side never collide.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace ferry::testing {

// The listening descriptor (backlog 64; the caller closes it) and its port in `port`; -1 when
// the kernel refuses.
inline int ListenLoopback(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    if (fd >= 0) {
      close(fd);
    }
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace ferry::testing
