// ferryd's control socket: a Unix stream socket, mode 0660, owned by the control group, that
// answers control-protocol lines (control_protocol.h) through a handler.
//
// Every client is untrusted: its peer credentials (SO_PEERCRED, SO_PEERGROUPS) are checked
// on accept, and one not allowed gets one refusal line and is closed. A request line is at
// most kMaxRequestBytes; a longer one is refused and the connection closed. At most
// kMaxClients connections; a client silent for kIdleTimeoutNs, or one that does not read its
// replies (kMaxPendingReplyBytes unread), is closed. Nothing a client sends can block ferryd:
// every socket is non-blocking.
//
// Who is allowed: root, ferryd's own user, and members (primary or supplementary) of the
// socket's group.
//
// Thread safety: ferryd's one thread. Lifetime: the socket file is created by Open and
// removed by the destructor.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "control/control_protocol.h"

namespace ferry::supervisor {

inline constexpr size_t kMaxClients = 64;
inline constexpr int64_t kIdleTimeoutNs = 30'000'000'000;
inline constexpr size_t kMaxPendingReplyBytes = 16 << 20;

// Who may control the node (the policy apart from the sockets, for tests).
struct PeerPolicy {
  uid_t own_uid = 0;
  gid_t group = 0;
  bool Allows(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) const;
};

class ControlServer {
 public:
  using Handler = std::function<Result<nlohmann::json>(const control::ControlRequest&)>;

  // Creates the socket at `path` (a stale socket file is replaced; any other file there is an
  // error), mode 0660, group `group` ("" = ferryd's). INVALID_ARGUMENT / INTERNAL naming the
  // path and the call that failed.
  static Result<ControlServer> Open(const std::string& path, const std::string& group,
                                    Handler handler);
  ControlServer(ControlServer&& other) noexcept;
  ControlServer& operator=(ControlServer&&) = delete;
  ~ControlServer();

  // A descriptor that is readable when Poll has work (an epoll set of the socket and clients).
  int fd() const { return epoll_fd_; }
  // Accepts, reads, answers and times out without blocking. `now` in CLOCK_MONOTONIC ns.
  void Poll(int64_t now);
  size_t clients() const { return clients_.size(); }
  uint64_t refused() const { return refused_; }
  const std::string& path() const { return path_; }

 private:
  struct Client {
    int fd = -1;
    std::string in;
    std::string out;
    int64_t last_active = 0;
    bool closing = false;  // Close once `out` is written.
  };
  ControlServer() = default;
  void Accept(int64_t now);
  void Serve(Client& client, int64_t now);
  void Flush(Client& client);
  void CloseClient(size_t index);

  std::string path_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  PeerPolicy policy_;
  Handler handler_;
  std::vector<Client> clients_;
  uint64_t refused_ = 0;
};

}  // namespace ferry::supervisor
