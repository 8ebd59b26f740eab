#include "supervisor/listeners.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ferry::supervisor {

Result<Listener> Listener::Open(const ListenAddress& address) {
  std::string host = address.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port = std::to_string(address.port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return InvalidArgument("listen address " + address.ToString() + ": " + gai_strerror(rc));
  }
  Listener listener;
  int err = 0;
  for (addrinfo* a = found; a != nullptr && listener.fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    int one = 1;
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
        bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
      listener.fd_ = fd;
      break;
    }
    err = errno;
    if (fd >= 0) {
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listener.fd_ < 0) {
    return Unavailable("cannot listen on " + address.ToString() + ": " + std::strerror(err));
  }
  listener.Describe();
  return listener;
}

Result<Listener> Listener::Adopt(int fd) {
  int type = 0;
  int listening = 0;
  socklen_t len = sizeof(type);
  bool stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
  len = sizeof(listening);
  bool accepts = getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening;
  if (!stream || !accepts) {
    return InvalidArgument("descriptor " + std::to_string(fd) +
                           " from socket activation is not a listening stream socket");
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  Listener listener;
  listener.fd_ = fd;
  listener.activated_ = true;
  listener.Describe();
  return listener;
}

void Listener::Describe() {
  Listener& listener = *this;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listener.fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  char text[INET6_ADDRSTRLEN] = "?";
  uint16_t bound_port = 0;
  if (bound.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    bound_port = ntohs(in->sin_port);
    listener.bound_ = std::string(text) + ":" + std::to_string(bound_port);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    bound_port = ntohs(in6->sin6_port);
    listener.bound_ = "[" + std::string(text) + "]:" + std::to_string(bound_port);
  }
}

Listener::Listener(Listener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      activated_(other.activated_),
      bound_(std::move(other.bound_)) {}

Listener::~Listener() {
  if (fd_ >= 0) {
    close(fd_);
  }
}

}  // namespace ferry::supervisor
