#include "control/control_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace ferry::control {
namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) {
      close(fd);
    }
  }
};

}  // namespace

Result<nlohmann::json> CallFerryd(const std::string& socket_path,
                                  const control::ControlRequest& request, int timeout_ms) {
  sockaddr_un address{};
  if (socket_path.size() >= sizeof(address.sun_path)) {
    return InvalidArgument("socket path too long: " + socket_path);
  }
  Fd sock{socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (sock.fd < 0) {
    return Internal(std::string("socket: ") + std::strerror(errno));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  if (connect(sock.fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    int err = errno;
    std::string hint = err == ENOENT || err == ECONNREFUSED
                           ? " (is ferryd running? `systemctl status ferry`)"
                       : err == EACCES ? " (run as root or a member of the socket's group)"
                                       : "";
    return Unavailable("cannot reach ferryd at " + socket_path + ": " + std::strerror(err) + hint);
  }
  std::string line = control::EncodeControlRequest(request);
  if (send(sock.fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    return Unavailable("ferryd at " + socket_path + " closed the connection");
  }
  std::string reply;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (reply.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{sock.fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) {
      return Unavailable("no reply from ferryd at " + socket_path + " within " +
                         std::to_string(timeout_ms) + " ms");
    }
    char buffer[65536];
    ssize_t n = recv(sock.fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) {
        continue;
      }
      break;
    }
    reply.append(buffer, static_cast<size_t>(n));
    if (reply.size() > (64u << 20)) {
      return Internal("ferryd's reply exceeds 64 MiB");
    }
  }
  size_t eol = reply.find('\n');
  if (eol == std::string::npos) {
    return Unavailable("ferryd at " + socket_path + " closed the connection without a reply");
  }
  return control::DecodeReply(std::string_view(reply).substr(0, eol));
}

}  // namespace ferry::control
