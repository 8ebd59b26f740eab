// The gRPC connection cap with real sockets: OpenConnections follows descriptors gRPC closes
// (numbers reused included), and a GrpcFrontEnd holding max_connections closes the next
// connection at once, serves HTTP/2 on the ones it keeps, and takes a new one when one leaves.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hookhost/frontend/grpc_service.h"
#include "net/open_connections.h"

namespace ferry::frontend {
namespace {

int TcpSocket() { return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }

TEST_CASE("OpenConnections forgets closed descriptors and numbers reused for other files") {
  net::OpenConnections open;
  int a = TcpSocket(), b = TcpSocket();
  open.Add(a);
  open.Add(b);
  CHECK(open.Count() == 2);
  CHECK(open.AtLeast(2));
  CHECK_FALSE(open.AtLeast(3));
  close(a);
  CHECK(open.Count() == 1);
  int reused = TcpSocket();  // Most likely a's number again: a different socket.
  CHECK(open.Count() == 1);
  open.Add(reused);
  CHECK(open.Count() == 2);
  close(b);
  close(reused);
  CHECK(open.Count() == 0);
}

// A listening socket on 127.0.0.1, port 0; its port in *port.
int Listen(uint16_t* port) {
  int fd = TcpSocket();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 64) == 0);
  socklen_t length = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

// Connects and sends HTTP/2's client preface and an empty SETTINGS frame.
int Connect(uint16_t port) {
  int fd = TcpSocket();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  static const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
  REQUIRE(write(fd, kPreface, sizeof(kPreface) - 1) == static_cast<ssize_t>(sizeof(kPreface) - 1));
  return fd;
}

// What the server did with a connection within 2 s: "http2" when it sent a SETTINGS frame,
// "closed" when it closed it, "silent" otherwise.
std::string Fate(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 2000) != 1) {
    return "silent";
  }
  unsigned char frame[9];
  ssize_t n = read(fd, frame, sizeof(frame));
  return n == 9 && frame[3] == 0x04 ? "http2" : "closed";
}

TEST_CASE("at max_connections the next connection is closed at once; a freed slot is reused") {
  uint16_t port = 0;
  int listener = Listen(&port);
  GrpcOptions options;
  options.max_connections = 2;
  GrpcFrontEnd front(nullptr, listener, options);  // No call is made: no service needed.
  REQUIRE(front.Start().ok());
  int first = Connect(port), second = Connect(port);
  CHECK(Fate(first) == "http2");
  CHECK(Fate(second) == "http2");
  int third = Connect(port);
  CHECK(Fate(third) == "closed");
  CHECK(front.refused_connections() == 1);
  close(third);
  close(first);  // gRPC sees the end and closes its descriptor: the slot is free again.
  std::string fate = "closed";
  for (int attempt = 0; attempt < 40 && fate == "closed"; ++attempt) {
    int next = Connect(port);
    fate = Fate(next);
    close(next);
    if (fate == "closed") {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  CHECK(fate == "http2");
  close(second);
  front.Stop(0);
  close(listener);
}

}  // namespace
}  // namespace ferry::frontend
