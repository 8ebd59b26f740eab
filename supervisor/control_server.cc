#include "supervisor/control_server.h"

#include <grp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

namespace ferry::supervisor {
namespace {

Error Errno(const std::string& what) { return Internal(what + ": " + std::strerror(errno)); }

}  // namespace

bool PeerPolicy::Allows(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) const {
  return uid == 0 || uid == own_uid || gid == group ||
         std::find(groups.begin(), groups.end(), group) != groups.end();
}

Result<ControlServer> ControlServer::Open(const std::string& path, const std::string& group,
                                          Handler handler) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return InvalidArgument("control socket path '" + path + "' is empty or too long");
  }
  ControlServer server;
  server.path_ = path;
  server.handler_ = std::move(handler);
  server.policy_.own_uid = geteuid();
  server.policy_.group = getegid();
  if (!group.empty()) {
    struct group* entry = nullptr;
    struct group storage {};
    std::vector<char> buffer(16384);
    if (getgrnam_r(group.c_str(), &storage, buffer.data(), buffer.size(), &entry) != 0 ||
        entry == nullptr) {
      return InvalidArgument("supervisor.control_group '" + group + "' is not a group here");
    }
    server.policy_.group = entry->gr_gid;
  }
  // Run by hand (no systemd RuntimeDirectory=), /run/ferry may not exist: made here, one
  // level only, reachable by ferryd's user and the control group alone.
  std::string parent = path.substr(0, path.find_last_of('/'));
  struct stat st {};
  if (!parent.empty() && stat(parent.c_str(), &st) != 0 && errno == ENOENT) {
    if (mkdir(parent.c_str(), 0750) != 0 ||
        chown(parent.c_str(), static_cast<uid_t>(-1), server.policy_.group) != 0 ||
        chmod(parent.c_str(), 0750) != 0) {
      return Errno("create the control socket's directory " + parent);
    }
  }
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return InvalidArgument("control socket path " + path +
                             " exists and is not a socket; refusing to replace it");
    }
    unlink(path.c_str());  // A predecessor's socket.
  }
  server.listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (server.listen_fd_ < 0) {
    return Errno("socket");
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // Created owner-only, then opened to the group once its owner is set: never a window where
  // another group could connect.
  mode_t old_mask = umask(0177);
  int bound = bind(server.listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  umask(old_mask);
  if (bound != 0) {
    return Errno("bind " + path);
  }
  if (chown(path.c_str(), static_cast<uid_t>(-1), server.policy_.group) != 0 ||
      chmod(path.c_str(), 0660) != 0) {
    return Errno("chown/chmod " + path);
  }
  if (listen(server.listen_fd_, 64) != 0) {
    return Errno("listen " + path);
  }
  server.epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (server.epoll_fd_ < 0) {
    return Errno("epoll_create1");
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = server.listen_fd_;
  if (epoll_ctl(server.epoll_fd_, EPOLL_CTL_ADD, server.listen_fd_, &event) != 0) {
    return Errno("epoll_ctl");
  }
  return server;
}

ControlServer::ControlServer(ControlServer&& other) noexcept
    : path_(std::move(other.path_)),
      listen_fd_(std::exchange(other.listen_fd_, -1)),
      epoll_fd_(std::exchange(other.epoll_fd_, -1)),
      policy_(other.policy_),
      handler_(std::move(other.handler_)),
      clients_(std::move(other.clients_)),
      refused_(other.refused_) {
  other.clients_.clear();
  other.path_.clear();
}

ControlServer::~ControlServer() {
  for (Client& c : clients_) {
    close(c.fd);
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
  }
  if (epoll_fd_ >= 0) {
    close(epoll_fd_);
  }
}

void ControlServer::Accept(int64_t now) {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return;  // EAGAIN, or a client that gave up; nothing to do either way.
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    std::vector<gid_t> groups(256);
    socklen_t groups_len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    bool known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &groups_len) == 0) {
      groups.resize(groups_len / sizeof(gid_t));
    } else {
      groups.clear();  // More than 256 groups, or an old kernel: the primary group decides.
    }
    std::optional<Error> refusal;
    if (clients_.size() >= kMaxClients) {
      refusal = ResourceExhausted("too many control connections (" + std::to_string(kMaxClients) +
                                  "); retry later");
    } else if (!known || !policy_.Allows(cred.uid, cred.gid, groups)) {
      refusal = InvalidArgument(
          "permission denied: uid " + (known ? std::to_string(cred.uid) : "unknown") +
          " is not root, ferryd's user or a member of the control socket's group");
    }
    if (refusal) {
      ++refused_;
      std::string line = control::EncodeReply(*refusal);
      (void)!send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      close(fd);
      continue;
    }
    clients_.push_back({fd, {}, {}, now, false});
  }
}

void ControlServer::Flush(Client& client) {
  while (!client.out.empty()) {
    ssize_t n = send(client.fd, client.out.data(), client.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        client.closing = true;
        client.out.clear();
      }
      break;
    }
    client.out.erase(0, static_cast<size_t>(n));
  }
  epoll_event event{};
  event.events = EPOLLIN | (client.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
  event.data.fd = client.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, client.fd, &event);
}

void ControlServer::Serve(Client& client, int64_t now) {
  char buffer[16384];
  while (!client.closing) {
    ssize_t n = recv(client.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) {
      client.closing = true;  // The client hung up; what it asked is still answered.
      break;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        client.closing = true;
        client.out.clear();
      }
      break;
    }
    client.last_active = now;
    client.in.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t eol; (eol = client.in.find('\n', start)) != std::string::npos; start = eol + 1) {
      std::string_view line(client.in.data() + start, eol - start);
      Result<control::ControlRequest> request = control::ParseControlRequest(line);
      client.out += request.ok() ? control::EncodeReply(handler_(*request))
                                 : control::EncodeReply(request.error());
    }
    client.in.erase(0, start);
    if (client.in.size() > control::kMaxRequestBytes) {
      client.out += control::EncodeReply(InvalidArgument(
          "request longer than " + std::to_string(control::kMaxRequestBytes) + " bytes; closing"));
      client.in.clear();
      client.closing = true;
    }
    if (client.out.size() > kMaxPendingReplyBytes) {
      client.out.clear();  // It does not read its replies.
      client.closing = true;
      client.in.clear();
    }
  }
  Flush(client);
}

void ControlServer::CloseClient(size_t index) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, clients_[index].fd, nullptr);
  close(clients_[index].fd);
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(index));
}

void ControlServer::Poll(int64_t now) {
  epoll_event events[32];
  int n = epoll_wait(epoll_fd_, events, 32, 0);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == listen_fd_) {
      Accept(now);
      continue;
    }
    for (Client& c : clients_) {
      if (c.fd == events[i].data.fd) {
        if (events[i].events & EPOLLOUT) {
          Flush(c);
        }
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          Serve(c, now);
        }
      }
    }
  }
  for (size_t i = clients_.size(); i-- > 0;) {
    Client& c = clients_[i];
    bool idle = now - c.last_active > kIdleTimeoutNs;
    if ((c.closing && c.out.empty()) || idle) {
      CloseClient(i);
    }
  }
}

}  // namespace ferry::supervisor
