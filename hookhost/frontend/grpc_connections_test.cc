// The gRPC connection cap with real sockets: OpenConnections follows descriptors gRPC closes
// (numbers reused included), and a GrpcFrontEnd holding max_connections closes the next
// connection at once, serves HTTP/2 on the ones it keeps, and takes a new one when one leaves.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "hookhost/frontend/grpc_front_end.h"
#include "net/open_connections.h"
#include "tests/testing/loopback.h"

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
// A listening socket on 127.0.0.1 at a free port (tests/testing/loopback.h).
int Listen(uint16_t* port) {
  int fd = testing::ListenLoopback(port);
  REQUIRE(fd >= 0);
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

// The server's first frame on `fd` within 2 s, header and payload; empty when none came.
std::string FirstFrame(int fd) {
  std::string frame;
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 2000) == 1) {
    char chunk[256];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) {
      break;
    }
    frame.append(chunk, static_cast<size_t>(n));
    if (frame.size() >= 9) {
      size_t length = (uint8_t(frame[0]) << 16) | (uint8_t(frame[1]) << 8) | uint8_t(frame[2]);
      if (frame.size() >= 9 + length) {
        return frame.substr(0, 9 + length);
      }
    }
  }
  return "";
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

TEST_CASE("at max_connections a connection idle a second or more makes room for a new one") {
  uint16_t port = 0;
  int listener = Listen(&port);
  GrpcOptions options;
  options.max_connections = 2;
  GrpcFrontEnd front(nullptr, listener, options);
  REQUIRE(front.Start().ok());
  int idle = Connect(port);
  REQUIRE(Fate(idle) == "http2");
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  int busy = Connect(port);  // Its preface and settings are fresh data: not idle.
  REQUIRE(Fate(busy) == "http2");
  int newcomer = Connect(port);
  CHECK(Fate(newcomer) == "http2");
  CHECK(front.evicted_connections() == 1);
  CHECK(front.refused_connections() == 0);
  // The idle one was closed (gRPC may say GOAWAY first); the busy one was kept.
  char buffer[256];
  pollfd p{idle, POLLIN, 0};
  ssize_t n = 1;
  while (n > 0 && poll(&p, 1, 2000) == 1) {
    n = read(idle, buffer, sizeof(buffer));
  }
  CHECK(n == 0);  // End of stream.
  pollfd q{busy, POLLIN, 0};
  ssize_t got = 1;
  while (got > 0 && poll(&q, 1, 200) == 1) {  // The rest of its frames, but no end.
    got = read(busy, buffer, sizeof(buffer));
  }
  CHECK(got > 0);
  // With none idle a second (a PING on `busy` just now, however long the reads above took),
  // the next is refused.
  static const char kPing[] =
      "\0\0\x08\x06\0\0\0\0\0"
      "12345678";
  REQUIRE(write(busy, kPing, sizeof(kPing) - 1) == static_cast<ssize_t>(sizeof(kPing) - 1));
  int fourth = Connect(port);
  CHECK(Fate(fourth) == "closed");
  CHECK(front.refused_connections() == 1);
  for (int fd : {idle, busy, newcomer, fourth}) close(fd);
  front.Stop(0);
  close(listener);
}

TEST_CASE("a connection's concurrent calls are bounded by max_streams, told in SETTINGS") {
  uint16_t port = 0;
  int listener = Listen(&port);
  GrpcOptions options;
  options.max_streams = 7;
  GrpcFrontEnd front(nullptr, listener, options);
  REQUIRE(front.Start().ok());
  int fd = Connect(port);
  std::string settings = FirstFrame(fd);
  REQUIRE(settings.size() >= 9);
  CHECK(settings[3] == 0x04);  // SETTINGS
  // Six-byte entries: a 16-bit identifier, a 32-bit value. MAX_CONCURRENT_STREAMS is 3.
  int64_t max_streams = -1;
  for (size_t at = 9; at + 6 <= settings.size(); at += 6) {
    if (uint8_t(settings[at]) == 0 && uint8_t(settings[at + 1]) == 3) {
      max_streams = (int64_t{uint8_t(settings[at + 2])} << 24) | (uint8_t(settings[at + 3]) << 16) |
                    (uint8_t(settings[at + 4]) << 8) | uint8_t(settings[at + 5]);
    }
  }
  CHECK(max_streams == 7);
  close(fd);
  front.Stop(0);
  close(listener);
}

TEST_CASE("a message that is not valid protobuf is INVALID_ARGUMENT naming its type") {
  uint16_t port = 0;
  int listener = Listen(&port);
  GrpcFrontEnd front(nullptr, listener, GrpcOptions{});  // ServerLive needs no service.
  REQUIRE(front.Start().ok());
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto call = [&](std::string bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, "/inference.GRPCInferenceService/ServerLive", grpc::StubOptions(),
                   &request, &response, [&done](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  // A field 1 of wire type 2 whose length runs past the message's end.
  grpc::Status truncated = call(std::string("\x0a\x7f\x01", 3));
  CHECK(truncated.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(truncated.error_message() ==
        "the 3-byte message is not a valid inference.ServerLiveRequest");
  CHECK(call("").ok());  // The empty message is a valid ServerLiveRequest.
  front.Stop(0);
  close(listener);
}

}  // namespace
}  // namespace ferry::frontend
