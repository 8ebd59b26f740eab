#include "net/http_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"

namespace ferry::net {
namespace {

constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = 1;
constexpr uint64_t kFirstConnection = 2;

namespace http = boost::beast::http;
using Parser = http::request_parser<http::string_body>;

struct Answer {
  uint64_t connection;
  uint64_t sequence;
  HttpResponse response;
};

// What Responders share with the server: they may outlive it.
struct Mailbox {
  Mutex mu;
  std::vector<Answer> answers GUARDED_BY(mu);
  std::vector<std::pair<int, std::string>> adopted GUARDED_BY(mu);  // Descriptor, subject.
  int event_fd = -1;
  ~Mailbox() {
    if (event_fd >= 0) {
      close(event_fd);
    }
  }
  void Post(Answer answer) {
    {
      MutexLock lock(&mu);
      answers.push_back(std::move(answer));
    }
    Wake();
  }
  void Adopt(int fd, std::string subject) {
    {
      MutexLock lock(&mu);
      adopted.emplace_back(fd, std::move(subject));
    }
    Wake();
  }
  void Wake() {
    uint64_t one = 1;
    (void)!write(event_fd, &one, sizeof(one));
  }
};

struct Connection {
  int fd = -1;
  std::string tls_subject;  // The client certificate's, for connections through TLS.
  std::string in;
  std::optional<Parser> parser;
  bool sent_continue = false;
  int64_t request_started = 0;  // First byte of a request not yet whole; 0 when none.
  int64_t last_active = 0;
  uint64_t next_sequence = 0;
  uint64_t next_write = 0;
  std::map<uint64_t, HttpResponse> answered;  // Not yet written (waiting for earlier ones).
  size_t in_flight = 0;                       // Dispatched, not answered.
  // The cancel signal of each request dispatched and not answered, by sequence.
  std::unordered_map<uint64_t, std::shared_ptr<CancelSignal>> cancels;
  std::string out;
  bool stop_reading = false;  // No further request is read (close, error, drain).
  bool close_when_written = false;
  bool peer_closed = false;
  uint64_t written = 0;                    // Answers serialized, toward max_keepalive_requests.
  uint32_t events = EPOLLIN | EPOLLRDHUP;  // Registered with epoll.
};

std::string Serialize(const HttpResponse& r, bool close) {
  std::string out = "HTTP/1.1 " + std::string(StatusText(r.status)) + "\r\n";
  for (const auto& [name, value] : r.headers) {
    out += name + ": " + value + "\r\n";
  }
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  if (close) {
    out += "Connection: close\r\n";
  }
  out += "\r\n";
  out += r.body;
  return out;
}

// The server's own refusals (malformed, too large, too slow, too many): {"error": ...}, closing.
HttpResponse Plain(int status, std::string text) {
  HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = nlohmann::json{{"error", std::move(text)}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  r.close = true;
  return r;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0) {
      return &v;
    }
  }
  return nullptr;
}

struct HttpServer::Impl {
  int listen_fd;
  HttpServerOptions options;
  HttpHandler handler;
  std::shared_ptr<Mailbox> mailbox = std::make_shared<Mailbox>();
  int epoll_fd = -1;
  std::unordered_map<uint64_t, Connection> connections;
  uint64_t next_id = kFirstConnection;
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> drain_seen{false};
  std::atomic<bool> drained{false};
  bool listening = false;  // Accepting on listen_fd (never when it is -1).
  int64_t drain_started = 0;
  HttpServerStats stats;

  void Accept(int64_t now);
  // Serves `fd` (accepted here or adopted), or answers 503 and closes it at the cap.
  void Admit(int fd, std::string tls_subject, int64_t now);
  // Closes the connection idle longest (at least min_idle_to_evict_ns, nothing of a request
  // read); false when none is.
  bool EvictIdlest(int64_t now);
  // `events`: what epoll reported for the connection.
  void Read(uint64_t id, Connection& c, int64_t now, uint32_t events);
  void Parse(uint64_t id, Connection& c, int64_t now);
  void Dispatch(uint64_t id, Connection& c, Parser& parser);
  void Fail(Connection& c, int status, std::string why);
  void WriteAnswered(Connection& c);
  void Flush(Connection& c);
  void CloseConnection(uint64_t id);
  // The client left: every request of `c` still unanswered is cancelled.
  void ClientLeft(Connection& c);
  void TakeAnswers();
  void Sweep(int64_t now);
  void Watch(uint64_t id, Connection& c, bool write);
};

void HttpServer::Impl::Watch(uint64_t id, Connection& c, bool write) {
  // Input while reading; once reading stopped, only the peer's close (bytes it sends then
  // are not read, and level-triggered EPOLLIN would fire for them forever); nothing after it.
  uint32_t input = c.peer_closed    ? 0u
                   : c.stop_reading ? static_cast<uint32_t>(EPOLLRDHUP)
                                    : static_cast<uint32_t>(EPOLLIN | EPOLLRDHUP);
  uint32_t want = input | (write ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (want == c.events) {
    return;
  }
  epoll_event e{};
  e.events = want;
  e.data.u64 = id;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &e);
  c.events = want;
}

bool HttpServer::Impl::EvictIdlest(int64_t now) {
  std::optional<uint64_t> idlest;
  int64_t oldest = now - options.min_idle_to_evict_ns;
  for (const auto& [id, c] : connections) {
    bool idle = c.in_flight == 0 && c.answered.empty() && c.out.empty() && c.request_started == 0 &&
                !c.close_when_written;
    int unread = 0;  // A request that arrived but is not read yet is not idleness.
    if (idle && c.last_active <= oldest && ioctl(c.fd, FIONREAD, &unread) == 0 && unread == 0) {
      idlest = id;
      oldest = c.last_active;
    }
  }
  if (!idlest) {
    return false;
  }
  ++stats.evicted_idle;  // Counted before the client can see the close.
  CloseConnection(*idlest);
  return true;
}

void HttpServer::Impl::Accept(int64_t now) {
  while (true) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return;  // EAGAIN (another hook host took it), or a connection reset before accept.
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Admit(fd, {}, now);
  }
}

void HttpServer::Impl::Admit(int fd, std::string tls_subject, int64_t now) {
  if (connections.size() >= options.max_connections && !EvictIdlest(now)) {
    // Answered and closed, so the kernel's backlog never fills with connections nobody
    // serves; the client retries (on another hook host, with luck).
    std::string busy =
        Serialize(Plain(503, "too many connections to this hook host (" +
                                 std::to_string(options.max_connections) + "); retry"),
                  true);
    ++stats.refused_connections;  // Counted before the client can see the answer.
    (void)!send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
    return;
  }
  uint64_t id = next_id++;
  Connection& c = connections[id];
  c.fd = fd;
  c.tls_subject = std::move(tls_subject);
  c.last_active = now;
  epoll_event e{};
  e.events = EPOLLIN | EPOLLRDHUP;
  e.data.u64 = id;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e);
  ++stats.connections;
}

void HttpServer::Impl::Fail(Connection& c, int status, std::string why) {
  ++stats.bad_requests;
  c.stop_reading = true;
  c.in.clear();
  c.parser.reset();
  // Answered after what is already in flight on this connection, then closed.
  HttpResponse r = Plain(status, std::move(why));
  c.answered[c.next_sequence++] = std::move(r);
  c.request_started = 0;
}

void HttpServer::Impl::Dispatch(uint64_t id, Connection& c, Parser& parser) {
  http::request<http::string_body> message = parser.release();
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  for (const auto& field : message) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request.body = std::move(message.body());
  request.tls_subject = c.tls_subject;
  bool keep_alive = message.keep_alive() && !draining.load();
  uint64_t sequence = c.next_sequence++;
  ++c.in_flight;
  request.cancel = std::make_shared<CancelSignal>();
  c.cancels.emplace(sequence, request.cancel);
  ++stats.requests;
  if (!keep_alive) {
    c.stop_reading = true;
  }
  std::weak_ptr<Mailbox> box = mailbox;
  handler(std::move(request), [box, id, sequence, keep_alive](HttpResponse response) {
    if (!keep_alive) {
      response.close = true;
    }
    if (std::shared_ptr<Mailbox> m = box.lock()) {
      m->Post({id, sequence, std::move(response)});
    }
  });
}

void HttpServer::Impl::Parse(uint64_t id, Connection& c, int64_t now) {
  while (!c.in.empty() && !c.stop_reading && c.in_flight < options.max_pipelined) {
    if (!c.parser) {
      c.parser.emplace();
      c.parser->header_limit(static_cast<uint32_t>(options.max_header_bytes));
      c.parser->body_limit(options.max_body_bytes);
      c.parser->eager(true);
      c.sent_continue = false;
    }
    if (c.request_started == 0) {
      c.request_started = now;
    }
    boost::beast::error_code ec;
    size_t used = c.parser->put(boost::asio::buffer(c.in.data(), c.in.size()), ec);
    c.in.erase(0, used);
    if ((!ec || ec == http::error::need_more) && c.parser->is_header_done() &&
        !c.parser->is_done() && !c.sent_continue) {
      // A client waiting for leave to send its body gets it (the limits were checked).
      auto expect = c.parser->get().find(http::field::expect);
      if (expect != c.parser->get().end() && expect->value().size() >= 12 &&
          strncasecmp(expect->value().data(), "100-continue", 12) == 0) {
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
      }
      c.sent_continue = true;
    }
    if ((!ec || ec == http::error::need_more) && c.parser->is_header_done() &&
        !c.parser->chunked() &&
        c.parser->get().find(http::field::transfer_encoding) != c.parser->get().end()) {
      // RFC 9112 6.1: a request whose last transfer coding is not chunked has no knowable
      // length: 400 and close, never its body read as a next request.
      Fail(c, 400, "Transfer-Encoding other than chunked is not supported");
      break;
    }
    if (ec == http::error::need_more ||
        (!ec && !c.parser->is_done() && (c.in.empty() || used == 0))) {
      break;
    }
    if (ec) {
      int status = ec == http::error::body_limit     ? 413
                   : ec == http::error::header_limit ? 431
                                                     : 400;
      Fail(c, status, "malformed HTTP request: " + ec.message());
      break;
    }
    if (c.parser->is_done()) {
      c.request_started = 0;
      Dispatch(id, c, *c.parser);
      c.parser.reset();
    }
  }
  if (c.in.empty() && c.parser && !c.parser->got_some()) {
    c.request_started = 0;  // Nothing of a next request yet: idle, not slow.
  }
}

void HttpServer::Impl::Read(uint64_t id, Connection& c, int64_t now, uint32_t events) {
  if (c.stop_reading) {
    // Nothing more is read (a last request, Connection: close), but a client that leaves
    // still cancels what it is waiting for.
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      c.peer_closed = true;
      ClientLeft(c);
    }
    return;
  }
  char buffer[65536];
  // Reads only what a request may still need: a connection over its limits stops here. Each
  // chunk is parsed as it comes, so a header over a limit is refused after one chunk (before,
  // a client sending without pause had max_header_bytes + max_body_bytes read first), and
  // the body moves into the request as it arrives instead of being held twice.
  while (!c.stop_reading && c.in.size() < options.max_header_bytes + options.max_body_bytes) {
    ssize_t n = recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      c.last_active = now;
      stats.bytes_read.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      Parse(id, c, now);
      continue;
    }
    if (n == 0) {
      c.peer_closed = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      c.peer_closed = true;
      c.stop_reading = true;
    }
    break;
  }
  Parse(id, c, now);
  if (c.peer_closed) {
    ClientLeft(c);
  }
  if (c.peer_closed && c.parser && c.parser->got_some()) {
    c.parser.reset();  // A request cut off by its client: nothing to answer.
    c.request_started = 0;
  }
}

void HttpServer::Impl::WriteAnswered(Connection& c) {
  for (auto it = c.answered.find(c.next_write); it != c.answered.end();
       it = c.answered.find(c.next_write)) {
    // Draining: the last answer of a connection closes it, requests read before the drain
    // included, so a keep-alive client's next request goes to a hook host that stays.
    bool last = c.next_write + 1 == c.next_sequence;
    bool close = it->second.close || ++c.written >= options.max_keepalive_requests ||
                 (draining.load() && last);
    c.out += Serialize(it->second, close);
    c.answered.erase(it);
    ++c.next_write;
    if (close) {
      c.stop_reading = true;
      c.close_when_written = true;
      c.answered.clear();
      break;
    }
  }
}

void HttpServer::Impl::Flush(Connection& c) {
  while (!c.out.empty()) {
    ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      break;
    }
    c.out.clear();  // The client is gone.
    c.close_when_written = true;
    c.stop_reading = true;
    break;
  }
}

void HttpServer::Impl::ClientLeft(Connection& c) {
  std::unordered_map<uint64_t, std::shared_ptr<CancelSignal>> cancels;
  cancels.swap(c.cancels);
  for (auto& [sequence, signal] : cancels) {
    signal->Fire();  // The answer still comes (CANCELLED) and is dropped or written.
  }
}

void HttpServer::Impl::CloseConnection(uint64_t id) {
  auto it = connections.find(id);
  if (it == connections.end()) {
    return;
  }
  ClientLeft(it->second);
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, it->second.fd, nullptr);
  close(it->second.fd);
  connections.erase(it);
}

void HttpServer::Impl::TakeAnswers() {
  uint64_t count;
  (void)!read(mailbox->event_fd, &count, sizeof(count));
  std::vector<Answer> answers;
  std::vector<std::pair<int, std::string>> adopted;
  {
    MutexLock lock(&mailbox->mu);
    answers.swap(mailbox->answers);
    adopted.swap(mailbox->adopted);
  }
  for (auto& [fd, subject] : adopted) {
    if (draining.load()) {
      close(fd);  // As a connection arriving after Drain: never served.
    } else {
      Admit(fd, std::move(subject), MonotonicNs());
    }
  }
  for (Answer& a : answers) {
    auto it = connections.find(a.connection);
    if (it == connections.end()) {
      continue;  // Its client left; the answer has nowhere to go.
    }
    Connection& c = it->second;
    --c.in_flight;
    c.cancels.erase(a.sequence);
    c.answered[a.sequence] = std::move(a.response);
  }
}

void HttpServer::Impl::Sweep(int64_t now) {
  std::vector<uint64_t> closing;
  for (auto& [id, c] : connections) {
    if (c.request_started != 0 && now - c.request_started > options.request_timeout_ns &&
        !c.stop_reading) {
      Fail(c, 408,
           "the request did not arrive whole within " +
               std::to_string(options.request_timeout_ns / 1'000'000'000) + " s");
    }
    WriteAnswered(c);
    if (!c.stop_reading && c.in_flight < options.max_pipelined) {
      Parse(id, c, now);  // Requests held back by the pipelining limit.
      WriteAnswered(c);
    }
    Flush(c);
    if (c.out.size() > options.max_unsent_bytes) {
      closing.push_back(id);  // It does not read its answers.
      continue;
    }
    bool idle = c.in_flight == 0 && c.answered.empty() && c.out.empty();
    bool idle_too_long =
        idle && c.request_started == 0 && now - c.last_active > options.idle_timeout_ns;
    if ((c.close_when_written && c.out.empty()) || (idle && c.peer_closed) || idle_too_long ||
        (idle && drain_seen.load() && c.request_started == 0 &&
         now - drain_started > kDrainGraceNs)) {
      closing.push_back(id);
      continue;
    }
    Watch(id, c, !c.out.empty());
  }
  for (uint64_t id : closing) {
    CloseConnection(id);
  }
}

HttpServer::HttpServer(int listen_fd, HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->listen_fd = listen_fd;
  impl_->options = options;
  impl_->handler = std::move(handler);
  impl_->mailbox->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  impl_->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event e{};
  if (listen_fd >= 0) {
    int flags = fcntl(listen_fd, F_GETFL);
    fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK);
    // Every hook host waits on the same listening socket: wake one, not all.
    e.events = EPOLLIN | EPOLLEXCLUSIVE;
    e.data.u64 = kListenTag;
    epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, listen_fd, &e);
    impl_->listening = true;
  }
  e.events = EPOLLIN;
  e.data.u64 = kWakeTag;
  epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, impl_->mailbox->event_fd, &e);
}

HttpServer::~HttpServer() {
  for (auto& [id, c] : impl_->connections) {
    close(c.fd);
  }
  close(impl_->epoll_fd);
}

void HttpServer::Run() {
  Impl& s = *impl_;
  epoll_event events[64];
  while (!s.stopping.load()) {
    if (s.draining.load() && !s.drain_seen.load()) {
      // No new connection. Requests on open ones are still read and answered (the handler
      // refuses them while draining), each answer closing its connection.
      if (s.listening) {
        epoll_ctl(s.epoll_fd, EPOLL_CTL_DEL, s.listen_fd, nullptr);
      }
      s.listening = false;
      s.drain_started = MonotonicNs();
      s.drain_seen.store(true);
    }
    int n = epoll_wait(s.epoll_fd, events, 64, 50);
    int64_t now = MonotonicNs();
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        if (!s.draining.load()) {
          s.Accept(now);
        }
      } else if (tag == kWakeTag) {
        s.TakeAnswers();
      } else if (auto it = s.connections.find(tag); it != s.connections.end()) {
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          s.Read(tag, it->second, now, events[i].events);
        }
      }
    }
    s.Sweep(now);
    if (s.draining.load() && s.connections.empty()) {
      s.drained.store(true);
    }
  }
}

void HttpServer::Adopt(int fd, std::string tls_subject) {
  impl_->mailbox->Adopt(fd, std::move(tls_subject));
}

void HttpServer::Drain() { impl_->draining.store(true); }
bool HttpServer::DrainSeen() const { return impl_->drain_seen.load(); }
bool HttpServer::Drained() const { return impl_->drained.load(); }
void HttpServer::Stop() { impl_->stopping.store(true); }
const HttpServerStats& HttpServer::stats() const { return impl_->stats; }

}  // namespace ferry::net
