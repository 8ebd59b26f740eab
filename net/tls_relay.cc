#include "net/tls_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/thread_name.h"

namespace ferry::net {
namespace {

constexpr size_t kChunk = 16 << 10;  // One TLS record's worth, per direction.
constexpr uint64_t kWakeTag = ~uint64_t{0};
constexpr uint64_t kListenerTag = kWakeTag - 64;  // + listener index; ids never get there.

struct Listener {
  int fd;
  const char* alpn;
  PlainSink sink;
};

// One client connection: the TLS side (`net`, the client's socket) and, once the handshake
// is done, the plaintext side (`plain`, the relay's end of the pair).
struct Link {
  int net = -1;
  int plain = -1;
  SSL* ssl = nullptr;
  size_t listener = 0;
  int64_t started = 0;
  bool established = false;
  bool wants_write = false;   // The last TLS call waits for the client's socket to drain.
  bool plain_closed = false;  // The server's end read to its end.
  bool plain_hup = false;     // The server hung up; `plain` is read without waiting on it.
  std::string to_plain;       // Decrypted, not yet written to the server.
  size_t to_plain_at = 0;
  std::string to_net;  // From the server, not yet taken by SSL_write.
  size_t to_net_at = 0;

  bool ToPlainPending() const { return to_plain_at < to_plain.size(); }
  bool ToNetPending() const { return to_net_at < to_net.size(); }
};

bool Transient(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

}  // namespace

struct TlsRelay::Impl {
  ContextSource contexts;
  TlsRelayOptions options;
  std::vector<Listener> listeners;
  std::unordered_map<uint64_t, Link> links;  // The relay thread's.
  uint64_t next_id = 1;
  size_t handshaking = 0;
  int epoll_fd = -1;
  int wake_fd = -1;
  bool listening = false;
  std::thread thread;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};
  TlsRelayStats stats;

  void Loop();
  void Accept(size_t listener);
  void Advance(uint64_t id, Link& l, uint32_t events, bool plain_side);
  bool Handshake(uint64_t id, Link& l);
  bool Pump(Link& l);
  bool PumpToPlain(Link& l, char* buffer, bool* progress);
  bool PumpToNet(Link& l, char* buffer, bool* progress);
  void Watch(uint64_t id, Link& l);
  void Close(uint64_t id);
  void Sweep(int64_t now);
};

void TlsRelay::Impl::Accept(size_t index) {
  const Listener& listener = listeners[index];
  while (true) {
    int fd = accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {  // Still readable: wait, do not spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;  // EAGAIN (another hook host took it), or a connection reset before accept.
    }
    TlsContext context = links.size() < options.max_connections ? contexts() : nullptr;
    SSL* ssl = context != nullptr ? SSL_new(context.get()) : nullptr;  // Holds the context.
    if (ssl == nullptr) {
      ++stats.refused_connections;
      close(fd);
      continue;
    }
    SSL_set_fd(ssl, fd);
    SetListenerProtocol(ssl, listener.alpn);
    SSL_set_accept_state(ssl);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t id = next_id++;
    Link& l = links[id];
    l.net = fd;
    l.ssl = ssl;
    l.listener = index;
    l.started = MonotonicNs();
    ++handshaking;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = id << 1;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e);
  }
}

// Runs the handshake as far as the socket allows; once done, makes the pair and hands the
// server its end. False: the connection is refused (not TLS, a bad or missing certificate).
bool TlsRelay::Impl::Handshake(uint64_t id, Link& l) {
  ERR_clear_error();
  int r = SSL_do_handshake(l.ssl);
  if (r != 1) {
    int error = SSL_get_error(l.ssl, r);
    l.wants_write = error == SSL_ERROR_WANT_WRITE;
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      return true;
    }
    ++stats.failed_handshakes;
    ERR_clear_error();
    return false;
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
    ++stats.refused_connections;
    return false;
  }
  l.established = true;
  l.wants_write = false;
  l.plain = pair[0];
  --handshaking;
  ++stats.handshakes;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = (id << 1) | 1;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, l.plain, &e);
  listeners[l.listener].sink(pair[1], PeerSubject(l.ssl));
  return true;
}

// Client to server: decrypts a record when nothing waits, then writes what waits.
bool TlsRelay::Impl::PumpToPlain(Link& l, char* buffer, bool* progress) {
  if (!l.ToPlainPending()) {
    int n = SSL_read(l.ssl, buffer, static_cast<int>(kChunk));
    if (n > 0) {
      l.to_plain.assign(buffer, static_cast<size_t>(n));
      l.to_plain_at = 0;
      *progress = true;
    } else {
      int error = SSL_get_error(l.ssl, n);
      if (error == SSL_ERROR_WANT_WRITE) {
        l.wants_write = true;
      } else if (error != SSL_ERROR_WANT_READ) {
        return false;  // close_notify, the socket's end, or a bad record: the client is gone.
      }
    }
  }
  if (l.ToPlainPending()) {
    ssize_t w = send(l.plain, l.to_plain.data() + l.to_plain_at, l.to_plain.size() - l.to_plain_at,
                     MSG_NOSIGNAL);
    if (w > 0) {
      l.to_plain_at += static_cast<size_t>(w);
      *progress = true;
    } else if (w < 0 && !Transient(errno)) {
      return false;  // The server closed its end.
    }
  }
  return true;
}

// Server to client: reads what the server wrote when nothing waits, then encrypts it.
bool TlsRelay::Impl::PumpToNet(Link& l, char* buffer, bool* progress) {
  if (!l.ToNetPending() && !l.plain_closed) {
    ssize_t n = recv(l.plain, buffer, kChunk, 0);
    if (n > 0) {
      l.to_net.assign(buffer, static_cast<size_t>(n));
      l.to_net_at = 0;
      *progress = true;
    } else if (n == 0) {
      l.plain_closed = true;
    } else if (!Transient(errno)) {
      return false;
    }
  }
  if (l.ToNetPending()) {
    int n = SSL_write(l.ssl, l.to_net.data() + l.to_net_at,
                      static_cast<int>(l.to_net.size() - l.to_net_at));
    if (n > 0) {
      l.to_net_at += static_cast<size_t>(n);
      *progress = true;
    } else {
      int error = SSL_get_error(l.ssl, n);
      if (error == SSL_ERROR_WANT_WRITE) {
        l.wants_write = true;
      } else if (error != SSL_ERROR_WANT_READ) {
        return false;
      }
    }
  }
  return true;
}

// Moves bytes both ways until neither side can take or give more. False: the link is over
// (either side closed or failed, or the server closed and everything it wrote was sent).
bool TlsRelay::Impl::Pump(Link& l) {
  char buffer[kChunk];
  l.wants_write = false;
  bool progress = true;
  while (progress) {
    progress = false;
    ERR_clear_error();
    if (!PumpToPlain(l, buffer, &progress) || !PumpToNet(l, buffer, &progress)) {
      return false;
    }
  }
  if (l.plain_closed && !l.ToNetPending()) {
    SSL_shutdown(l.ssl);  // close_notify, best effort: the client sees a clean end.
    return false;
  }
  return true;
}

// Interest follows what waits: the client's socket is read only when the server has taken
// the last record (backpressure), the server's end only when the client has taken the last
// answer.
void TlsRelay::Impl::Watch(uint64_t id, Link& l) {
  epoll_event e{};
  e.events = (l.ToPlainPending() ? 0u : uint32_t{EPOLLIN}) | (l.wants_write ? EPOLLOUT : 0u);
  e.data.u64 = id << 1;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, l.net, &e);
  if (l.established && !l.plain_hup) {
    e.events = (l.ToNetPending() || l.plain_closed ? 0u : uint32_t{EPOLLIN}) |
               (l.ToPlainPending() ? EPOLLOUT : 0u);
    e.data.u64 = (id << 1) | 1;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, l.plain, &e);
  }
}

void TlsRelay::Impl::Advance(uint64_t id, Link& l, uint32_t events, bool plain_side) {
  if (!plain_side && (events & (EPOLLHUP | EPOLLERR))) {
    Close(id);  // The client is gone (a reset, or both directions closed).
    return;
  }
  if (plain_side && (events & EPOLLERR)) {
    Close(id);
    return;
  }
  if (plain_side && (events & EPOLLHUP) && !l.plain_hup) {
    // Reported whatever the interest: stop waiting on it (level-triggered, it would spin)
    // and read what is left as the client takes the answers.
    l.plain_hup = true;
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, l.plain, nullptr);
  }
  if (!l.established) {
    if (!Handshake(id, l)) {
      Close(id);
      return;
    }
    if (!l.established) {
      Watch(id, l);
      return;
    }
  }
  if (!Pump(l)) {
    Close(id);
    return;
  }
  Watch(id, l);
}

void TlsRelay::Impl::Close(uint64_t id) {
  auto it = links.find(id);
  if (it == links.end()) {
    return;
  }
  Link& l = it->second;
  if (!l.established) {
    --handshaking;
  }
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, l.net, nullptr);
  SSL_free(l.ssl);
  close(l.net);
  if (l.plain >= 0) {
    if (!l.plain_hup) {
      epoll_ctl(epoll_fd, EPOLL_CTL_DEL, l.plain, nullptr);
    }
    close(l.plain);  // The server sees its connection end.
  }
  links.erase(it);
}

void TlsRelay::Impl::Sweep(int64_t now) {
  std::vector<uint64_t> late;
  for (const auto& [id, l] : links) {
    if (!l.established && now - l.started > options.handshake_timeout_ns) {
      late.push_back(id);
    }
  }
  for (uint64_t id : late) {
    ++stats.failed_handshakes;
    Close(id);
  }
}

void TlsRelay::Impl::Loop() {
  epoll_event events[64];
  while (!stopping.load()) {
    if (draining.load() && listening) {
      for (const Listener& listener : listeners) {
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listener.fd, nullptr);
      }
      listening = false;
    }
    // Nothing to time out: sleep until something happens (an idle node polls nothing).
    int timeout_ms = handshaking > 0 ? 250 : -1;
    int n = epoll_wait(epoll_fd, events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t count;
        (void)!read(wake_fd, &count, sizeof(count));
      } else if (tag >= kListenerTag) {
        if (!draining.load()) {
          Accept(static_cast<size_t>(tag - kListenerTag));
        }
      } else if (auto it = links.find(tag >> 1); it != links.end()) {
        Advance(tag >> 1, it->second, events[i].events, (tag & 1) != 0);
      }
    }
    if (handshaking > 0) {
      Sweep(MonotonicNs());
    }
  }
}

TlsRelay::TlsRelay(ContextSource contexts, TlsRelayOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->contexts = std::move(contexts);
  impl_->options = options;
}

TlsRelay::~TlsRelay() { Stop(); }

void TlsRelay::AddListener(int listen_fd, const char* alpn, PlainSink sink) {
  int flags = fcntl(listen_fd, F_GETFL);
  fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK);
  impl_->listeners.push_back({listen_fd, alpn, std::move(sink)});
}

Status TlsRelay::Start() {
  Impl& s = *impl_;
  s.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  s.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.epoll_fd < 0 || s.wake_fd < 0) {
    return Internal("the TLS relay's epoll or eventfd could not be made");
  }
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = kWakeTag;
  epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd, &e);
  for (size_t i = 0; i < s.listeners.size(); ++i) {
    e.events = EPOLLIN | EPOLLEXCLUSIVE;  // Every hook host waits on it: wake one, not all.
    e.data.u64 = kListenerTag + i;
    epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listeners[i].fd, &e);
  }
  s.listening = true;
  s.thread = std::thread([&s] {
    NameThisThread("ferry-tls");
    s.Loop();
  });
  return OkStatus();
}

void TlsRelay::Drain() {
  impl_->draining.store(true);
  if (impl_->wake_fd >= 0) {
    uint64_t one = 1;
    (void)!write(impl_->wake_fd, &one, sizeof(one));
  }
}

void TlsRelay::Stop() {
  Impl& s = *impl_;
  if (!s.thread.joinable()) {
    return;
  }
  s.stopping.store(true);
  uint64_t one = 1;
  (void)!write(s.wake_fd, &one, sizeof(one));
  s.thread.join();
  while (!s.links.empty()) {
    s.Close(s.links.begin()->first);
  }
  close(s.epoll_fd);
  close(s.wake_fd);
  s.epoll_fd = s.wake_fd = -1;
}

const TlsRelayStats& TlsRelay::stats() const { return impl_->stats; }

}  // namespace ferry::net
