// The HTTP server over a real socket (port 0): keep-alive, pipelining order with answers out
// of order, and hostile clients (malformed, oversized, slow, never reading, too many).
#include "net/http_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::net {
namespace {

struct Server {
  int listen_fd = -1;
  uint16_t port = 0;
  std::unique_ptr<HttpServer> server;
  std::thread thread;

  Server(HttpServerOptions options, HttpHandler handler) {
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(listen_fd, 128) == 0);
    socklen_t len = sizeof(a);
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    server = std::make_unique<HttpServer>(listen_fd, options, std::move(handler));
    thread = std::thread([this] { server->Run(); });
  }
  ~Server() {
    server->Stop();
    thread.join();
    close(listen_fd);
  }
  int Connect() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    timeval t{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
    return fd;
  }
};

void Send(int fd, const std::string& text) {
  REQUIRE(send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

// Everything until the peer closes (or 10 s pass).
std::string ReadAll(int fd) {
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// Reads until `count` responses (by their status lines) have arrived.
std::string ReadResponses(int fd, size_t count) {
  std::string out;
  char buffer[4096];
  auto responses = [&] {
    size_t n = 0;
    for (size_t p = out.find("HTTP/1.1 "); p != std::string::npos;
         p = out.find("HTTP/1.1 ", p + 1)) {
      ++n;
    }
    return n;
  };
  while (responses() < count) {
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      break;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  // The last body: wait for its bytes (bodies here are short and end with '}').
  while (!out.empty() && out.back() != '}') {
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      break;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

HttpHandler Echo() {
  return [](HttpRequest&& r, Responder respond) {
    HttpResponse out;
    out.body = "{\"target\":\"" + r.target + "\",\"bytes\":" + std::to_string(r.body.size()) + "}";
    respond(std::move(out));
  };
}

TEST_CASE(
    "keep-alive and pipelining: answers in request order even when they finish out of order") {
  // Even-numbered requests are answered 50 ms late, from another thread.
  std::vector<std::thread> late;
  std::mutex mu;
  Server s({}, [&](HttpRequest&& r, Responder respond) {
    HttpResponse out;
    out.body = "{\"t\":\"" + r.target + "\"}";
    if (r.target.back() % 2 == 0) {
      std::lock_guard<std::mutex> lock(mu);
      late.emplace_back([respond, out] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        respond(out);
      });
    } else {
      respond(std::move(out));
    }
  });
  int fd = s.Connect();
  std::string pipelined;
  for (int i = 0; i < 6; ++i) {
    pipelined += "GET /r" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  Send(fd, pipelined);
  std::string got = ReadResponses(fd, 6);
  size_t last = 0;
  for (int i = 0; i < 6; ++i) {
    size_t at = got.find("{\"t\":\"/r" + std::to_string(i) + "\"}");
    REQUIRE(at != std::string::npos);
    CHECK(at >= last);
    last = at;
  }
  close(fd);
  std::lock_guard<std::mutex> lock(mu);
  for (std::thread& t : late) {
    t.join();
  }
}

TEST_CASE("hostile clients: malformed, oversized, slow; the server keeps serving") {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  options.max_header_bytes = 2000;
  options.request_timeout_ns = 300'000'000;
  options.max_connections = 8;
  Server s(options, Echo());

  SUBCASE("malformed request line: 400 and closed") {
    int fd = s.Connect();
    Send(fd, "GARBAGE\r\n\r\n");
    std::string got = ReadAll(fd);
    CHECK(got.find("HTTP/1.1 400") == 0);
    CHECK(got.find("Connection: close") != std::string::npos);
    close(fd);
  }
  SUBCASE("a Content-Length over the limit: 413 before the body is read") {
    int fd = s.Connect();
    Send(fd, "POST /x HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n");
    CHECK(ReadAll(fd).find("HTTP/1.1 413") == 0);
    close(fd);
  }
  SUBCASE("a header over the limit: 431") {
    int fd = s.Connect();
    Send(fd, "GET /x HTTP/1.1\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n");
    CHECK(ReadAll(fd).find("HTTP/1.1 431") == 0);
    close(fd);
  }
  SUBCASE("a body shorter than its Content-Length, trickled: 408 at the request timeout") {
    int fd = s.Connect();
    Send(fd, "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    auto start = std::chrono::steady_clock::now();
    std::string got = ReadAll(fd);
    CHECK(got.find("HTTP/1.1 408") == 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    close(fd);
  }
  SUBCASE("a header sent a byte at a time past the timeout (slowloris): 408") {
    int fd = s.Connect();
    std::string got;
    for (char ch : std::string("GET /slow HTTP/1.1\r\nHost: x\r\n")) {
      if (send(fd, &ch, 1, MSG_NOSIGNAL) != 1) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    got = ReadAll(fd);
    CHECK(got.find("HTTP/1.1 408") == 0);
    close(fd);
  }
  SUBCASE("chunked bodies are accepted and bounded") {
    int fd = s.Connect();
    Send(fd, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    std::string got = ReadResponses(fd, 1);
    CHECK(got.find("\"bytes\":3") != std::string::npos);
    close(fd);
  }
  SUBCASE("a transfer coding other than chunked: 400 and closed, the body never a request") {
    int fd = s.Connect();
    Send(fd,
         "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n"
         "GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n");
    std::string got = ReadAll(fd);  // Until the server closes.
    CHECK(got.find("HTTP/1.1 400") == 0);
    CHECK(got.find("Transfer-Encoding other than chunked") != std::string::npos);
    CHECK(got.find("/smuggled") == std::string::npos);
    CHECK(got.find("HTTP/1.1", 1) == std::string::npos);  // One answer only.
    close(fd);
  }
  SUBCASE("more connections than allowed: 503, then served again once they close") {
    std::vector<int> held;
    uint64_t before = s.server->stats().connections.load();
    for (int i = 0; i < 8; ++i) {
      held.push_back(s.Connect());
    }
    // Polled, not slept: the server thread may run late on a loaded machine.
    for (int i = 0; i < 5000 && s.server->stats().connections.load() < before + 8; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(s.server->stats().connections.load() == before + 8);
    int extra = s.Connect();
    CHECK(ReadAll(extra).find("HTTP/1.1 503") == 0);
    close(extra);
    for (int fd : held) {
      close(fd);
    }
    // Served again once the server has seen the closes (refused until then).
    bool served = false;
    for (int i = 0; i < 500 && !served; ++i) {
      int again = s.Connect();
      // A refused connection may be closed before this is sent: its result is not checked.
      const std::string text =
          "POST /ok HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi";
      (void)send(again, text.data(), text.size(), MSG_NOSIGNAL);
      served = ReadAll(again).find("HTTP/1.1 200 OK") == 0;
      close(again);
      if (!served) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    CHECK(served);
  }
  // Whatever came before, a good request is served.
  int fd = s.Connect();
  Send(fd, "POST /ok HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
  std::string got = ReadAll(fd);
  CHECK(got.find("HTTP/1.1 200 OK") == 0);
  CHECK(got.find("\"bytes\":5") != std::string::npos);
  close(fd);
  CHECK(s.server->stats().bad_requests.load() <= 5);
}

TEST_CASE("a body past the limit already waiting in the socket is refused after one chunk") {
  HttpServerOptions options;
  options.max_body_bytes = 64 << 20;
  // A handler that holds the server's thread, so the next client's bytes pile up unread.
  auto hold = [](HttpRequest&& r, Responder respond) {
    if (r.target == "/hold") std::this_thread::sleep_for(std::chrono::milliseconds(400));
    respond(HttpResponse{});
  };
  Server s(options, hold);
  int big = 8 << 20;  // Room for the pile in the kernel (as root; else its defaults).
  setsockopt(s.listen_fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
  int holder = s.Connect();
  Send(holder, "GET /hold HTTP/1.1\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int fd = s.Connect();
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
  Send(fd, "POST /x HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n");
  std::string chunk(1 << 16, 'x');
  size_t piled = 0;
  while (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) {
    piled += chunk.size();
  }
  REQUIRE(piled >= (1u << 20));
  CHECK(ReadAll(fd).find("HTTP/1.1 413") == 0);
  // The header and one chunk read, not the pile: before, the whole pile was read first (up to
  // max_header_bytes + max_body_bytes), then refused.
  CHECK(s.server->stats().bytes_read.load() < (512u << 10));
  close(fd);
  close(holder);
}

TEST_CASE("at max_connections an idle connection makes room; a busy one never does") {
  HttpServerOptions options;
  options.max_connections = 2;
  options.min_idle_to_evict_ns = 0;
  Server server(options, Echo());
  const std::string get = "GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string partial = "POST /y HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc";
  int idle = server.Connect();
  Send(idle, get);
  CHECK(ReadResponses(idle, 1).find("200 OK") != std::string::npos);  // Kept alive, idle.
  int busy = server.Connect();
  Send(busy, partial);  // A request begun: never evicted.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int fresh = server.Connect();
  Send(fresh, get);
  CHECK(ReadResponses(fresh, 1).find("200 OK") != std::string::npos);
  CHECK(ReadAll(idle).empty());  // Closed to make room.
  CHECK(server.server->stats().evicted_idle.load() == 1);
  Send(fresh, partial);  // Now both are busy: the next is refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int refused = server.Connect();
  CHECK(ReadAll(refused).find("503") != std::string::npos);
  CHECK(server.server->stats().refused_connections.load() == 1);
  for (int fd : {idle, busy, fresh, refused}) {
    close(fd);
  }
}

TEST_CASE("after max_keepalive_requests answers a connection is closed, so clients spread") {
  HttpServerOptions options;
  options.max_keepalive_requests = 3;
  Server server(options, Echo());
  int fd = server.Connect();
  Send(fd, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
  std::string first = ReadResponses(fd, 2);
  CHECK(first.find("Connection: close") == std::string::npos);
  Send(fd, "GET /3 HTTP/1.1\r\nHost: h\r\n\r\n");
  std::string third = ReadAll(fd);  // Answered, then closed.
  CHECK(third.find("\"target\":\"/3\"") != std::string::npos);
  CHECK(third.find("Connection: close") != std::string::npos);
  close(fd);
}

TEST_CASE("draining, the last answer of a connection closes it; earlier ones are all written") {
  // Requests read before the drain and answered after it: a keep-alive client must hear that
  // this server is going (its next request then reaches one that stays), and no pipelined
  // answer may be lost for it.
  std::mutex mu;
  std::vector<Responder> held;
  Server s({}, [&](HttpRequest&& request, Responder respond) {
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(respond));
  });
  int fd = s.Connect();
  Send(fd, "GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
  for (int i = 0; i < 2000; ++i) {
    std::lock_guard<std::mutex> lock(mu);
    if (held.size() == 2) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s.server->Drain();
  while (!s.server->DrainSeen()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<Responder> answers;
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(held.size() == 2);
    answers = std::move(held);
  }
  for (int i = 0; i < 2; ++i) {
    HttpResponse r;
    r.body = "answer " + std::to_string(i + 1);
    answers[i](std::move(r));
  }
  std::string both = ReadAll(fd);  // Both answers, then the close.
  size_t first = both.find("answer 1");
  size_t second = both.find("answer 2");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(both.substr(0, first).find("Connection: close") == std::string::npos);
  CHECK(both.substr(first, second - first).find("Connection: close") != std::string::npos);
  close(fd);
}

TEST_CASE("Expect: 100-continue gets its interim answer; drain answers what was read") {
  Server s({}, Echo());
  int fd = s.Connect();
  Send(fd, "POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  char buffer[64] = {};
  ssize_t n = recv(fd, buffer, sizeof(buffer) - 1, 0);
  REQUIRE(n > 0);
  CHECK(std::string(buffer).find("HTTP/1.1 100 Continue") == 0);
  Send(fd, "body");
  CHECK(ReadResponses(fd, 1).find("\"bytes\":4") != std::string::npos);
  s.server->Drain();
  for (int i = 0; i < 2000 && !s.server->Drained(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(s.server->Drained());  // The idle keep-alive connection was closed.
  CHECK(recv(fd, buffer, 1, 0) <= 0);
  close(fd);
}

}  // namespace
}  // namespace ferry::net

namespace ferry::net {
namespace {

TEST_CASE("a client that closes its connection cancels its unanswered requests, not others") {
  // Requests are held (answered later by the test); /fast ones are answered at once.
  std::mutex mu;
  std::vector<std::pair<std::shared_ptr<CancelSignal>, Responder>> held;
  Server s({}, [&](HttpRequest&& r, Responder respond) {
    if (r.target == "/fast") {
      respond(HttpResponse{200, {}, "{}", false});
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    held.emplace_back(r.cancel, std::move(respond));
  });
  auto held_count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return held.size();
  };
  int leaving = s.Connect();
  int staying = s.Connect();
  Send(leaving,
       "GET /fast HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n"
       "GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ReadResponses(leaving, 1).find("200 OK") != std::string::npos);
  Send(staying, "GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int i = 0; i < 1000 && held_count() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(held_count() == 3);
  std::unique_lock<std::mutex> lock(mu);
  for (auto& [signal, respond] : held) {
    REQUIRE(signal != nullptr);
    CHECK_FALSE(signal->fired());
  }
  close(leaving);
  // Fired on the server's thread when it reads the close.
  auto fired = [&](size_t i) {
    for (int k = 0; k < 1000 && !held[i].first->fired(); ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return held[i].first->fired();
  };
  CHECK(fired(0));
  CHECK(fired(1));
  CHECK_FALSE(held[2].first->fired());
  // A signal fired before anyone subscribed runs the action at once.
  bool ran = false;
  held[0].first->Subscribe([&] { ran = true; });
  CHECK(ran);
  // The staying client is still served.
  held[2].second(HttpResponse{200, {}, "{\"c\":1}", false});
  CHECK(ReadResponses(staying, 1).find("{\"c\":1}") != std::string::npos);
  // Answers for the gone connection go nowhere, harmlessly.
  held[0].second(HttpResponse{499, {}, "{}", false});
  held[1].second(HttpResponse{499, {}, "{}", false});
  close(staying);

  // A last request (Connection: close: nothing more is read) still sees its client leave.
  int last = s.Connect();
  Send(last, "GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  lock.unlock();
  for (int i = 0; i < 1000 && held_count() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  lock.lock();
  REQUIRE(held.size() == 4);
  CHECK_FALSE(held[3].first->fired());
  close(last);
  CHECK(fired(3));
  held[3].second(HttpResponse{499, {}, "{}", false});
}

}  // namespace
}  // namespace ferry::net

namespace ferry::net {
namespace {

TEST_CASE("a server of adopted connections serves them with their TLS subject") {
  std::mutex mu;
  std::vector<std::string> subjects;
  HttpServer server(-1, HttpServerOptions{}, [&](HttpRequest&& r, Responder respond) {
    {
      std::lock_guard<std::mutex> lock(mu);
      subjects.push_back(r.tls_subject);
    }
    HttpResponse answer;
    answer.body = "hello " + r.tls_subject;
    respond(std::move(answer));
  });
  std::thread thread([&] { server.Run(); });
  struct Join {  // Joined however the case ends (a failed REQUIRE throws).
    HttpServer& server;
    std::thread& thread;
    ~Join() {
      server.Stop();
      thread.join();
    }
  } join{server, thread};
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0);
  server.Adopt(pair[0], "CN=alice,O=ferry tests");
  int client = pair[1];
  fcntl(client, F_SETFL, fcntl(client, F_GETFL) & ~O_NONBLOCK);
  timeval t{10, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
  Send(client, "GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  std::string answer = ReadAll(client);
  CHECK(answer.find("200 OK") != std::string::npos);
  CHECK(answer.find("hello CN=alice,O=ferry tests") != std::string::npos);
  close(client);
  // Adopted while draining: closed, never served.
  server.Drain();
  while (!server.DrainSeen()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  server.Adopt(pair[0], "");
  setsockopt(pair[1], SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
  // The server may close it before or after this arrives: either way no answer comes.
  std::string request = "GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
  (void)!send(pair[1], request.data(), request.size(), MSG_NOSIGNAL);
  CHECK(ReadAll(pair[1]).empty());
  close(pair[1]);
  std::lock_guard<std::mutex> lock(mu);
  CHECK(subjects == std::vector<std::string>{"CN=alice,O=ferry tests"});
}

}  // namespace
}  // namespace ferry::net
