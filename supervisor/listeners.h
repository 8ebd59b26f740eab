// The node's listening sockets, created by ferryd and handed down to the hook hosts, which
// cannot create sockets inside their sandbox. One socket per address is shared by every hook
// host: the kernel hands each connection to one of them (they wait with EPOLLEXCLUSIVE).
//
// Thread safety: ferryd's one thread. Lifetime: the Listener owns its descriptor.
#pragma once

#include <string>

#include "common/result.h"
#include "config/node_config.h"

namespace ferry::supervisor {

class Listener {
 public:
  // Binds and listens on `address` ("0.0.0.0:8000", "[::1]:0", "localhost:8000"; port 0 picks
  // a free port). The descriptor is close-on-exec (Spawn hands it down explicitly).
  // INVALID_ARGUMENT for an address that does not resolve; UNAVAILABLE naming the address
  // when it cannot be bound (in use, not permitted).
  static Result<Listener> Open(const ListenAddress& address);
  // Takes a listening stream socket passed by systemd socket activation. INVALID_ARGUMENT when
  // `fd` is not one.
  static Result<Listener> Adopt(int fd);
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&& other) = delete;
  ~Listener();

  int fd() const { return fd_; }
  bool activated() const { return activated_; }
  // "127.0.0.1:41234": the port actually bound.
  const std::string& bound() const { return bound_; }

 private:
  Listener() = default;
  void Describe();  // Sets bound_ from getsockname.
  int fd_ = -1;
  bool activated_ = false;
  std::string bound_;
};

}  // namespace ferry::supervisor
