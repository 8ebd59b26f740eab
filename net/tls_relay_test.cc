// TlsRelay against OpenSSL clients on real sockets: bytes both ways (backpressure included),
// plaintext and stalled clients refused, client certificates mapped to their subject,
// certificates replaced for new connections only, the connection cap and ALPN.
#include "net/tls_relay.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "tests/testing/loopback.h"
#include "tests/testing/test_certs.h"

namespace ferry::net {
namespace {

using ferry::testing::TestIdentity;
using ferry::testing::TestPki;

// A listening socket on 127.0.0.1 at a free port (tests/testing/loopback.h).
int Listen(uint16_t* port) {
  int fd = testing::ListenLoopback(port);
  REQUIRE(fd >= 0);
  return fd;
}

int Dial(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// A blocking TLS client trusting the test CA, with an optional certificate of its own.
struct Client {
  int fd = -1;
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  bool connected = false;
  ~Client() {
    if (ssl != nullptr) {
      SSL_free(ssl);
    }
    SSL_CTX_free(ctx);
    if (fd >= 0) {
      close(fd);
    }
  }
  // The handshake and one round trip of "ping" prove the connection usable.
  std::string Alpn() const {
    const unsigned char* p = nullptr;
    unsigned int n = 0;
    SSL_get0_alpn_selected(ssl, &p, &n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  long ServerSerial() const {
    X509* cert = SSL_get0_peer_certificate(ssl);
    return cert != nullptr ? ASN1_INTEGER_get(X509_get0_serialNumber(cert)) : -1;
  }
  bool Write(const std::string& data) {
    return SSL_write(ssl, data.data(), static_cast<int>(data.size())) ==
           static_cast<int>(data.size());
  }
  // Reads exactly `n` bytes; short when the connection ends first.
  std::string Read(size_t n) {
    std::string out;
    char buffer[16384];
    while (out.size() < n) {
      int got = SSL_read(ssl, buffer, static_cast<int>(std::min(sizeof(buffer), n - out.size())));
      if (got <= 0) {
        break;
      }
      out.append(buffer, static_cast<size_t>(got));
    }
    return out;
  }
};

std::unique_ptr<Client> Connect(uint16_t port, const TestPki& pki, const TestIdentity* me,
                                const char* alpn = nullptr) {
  signal(SIGPIPE, SIG_IGN);  // Writing to a refused connection fails, not kills.
  auto c = std::make_unique<Client>();
  c->fd = Dial(port);
  c->ctx = SSL_CTX_new(TLS_client_method());
  X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), pki.ca.cert.get());
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, nullptr);
  if (me != nullptr) {
    SSL_CTX_use_certificate(c->ctx, me->cert.get());
    SSL_CTX_use_PrivateKey(c->ctx, me->key.get());
  }
  c->ssl = SSL_new(c->ctx);
  SSL_set_fd(c->ssl, c->fd);
  if (alpn != nullptr) {
    std::string wire = std::string(1, static_cast<char>(std::strlen(alpn))) + alpn;
    SSL_set_alpn_protos(c->ssl, reinterpret_cast<const unsigned char*>(wire.data()),
                        static_cast<unsigned int>(wire.size()));
  }
  c->connected = SSL_connect(c->ssl) == 1;
  ERR_clear_error();
  return c;
}

// What the relay handed the server: plaintext ends and their subjects, in order.
struct Accepted {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, std::string>> ends;
  PlainSink Sink() {
    return [this](int fd, const std::string& subject) {
      std::lock_guard<std::mutex> lock(mu);
      ends.emplace_back(fd, subject);
      cv.notify_all();
    };
  }
  // The next end (made blocking), or -1 after `wait`.
  std::pair<int, std::string> Next(std::chrono::milliseconds wait = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, wait, [this] { return !ends.empty(); })) {
      return {-1, ""};
    }
    auto end = ends.front();
    ends.pop_front();
    fcntl(end.first, F_SETFL, fcntl(end.first, F_GETFL) & ~O_NONBLOCK);
    return end;
  }
};

std::string ReadPlain(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, out.data() + got, n - got);
    if (r <= 0) {
      break;
    }
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

struct Fixture {
  TestPki pki;
  uint16_t port = 0;
  int listen_fd = Listen(&port);
  Accepted accepted;
  std::mutex mu;
  TlsContext context;
  std::unique_ptr<TlsRelay> relay;

  explicit Fixture(bool mutual, TlsRelayOptions options = {}) {
    TlsMaterial m{pki.server.cert_pem, pki.server.key_pem, mutual ? pki.ca.cert_pem : ""};
    Result<TlsContext> made = MakeServerContext(m);
    REQUIRE(made.ok());
    context = *made;
    relay = std::make_unique<TlsRelay>(
        [this] {
          std::lock_guard<std::mutex> lock(mu);
          return context;
        },
        options);
    relay->AddListener(listen_fd, "http/1.1", accepted.Sink());
    REQUIRE(relay->Start().ok());
  }
  ~Fixture() {
    relay->Stop();
    close(listen_fd);
  }
};

TEST_CASE("bytes cross the relay both ways, megabytes at a time") {
  Fixture f(false);
  std::unique_ptr<Client> client = Connect(f.port, f.pki, nullptr);
  REQUIRE(client->connected);
  auto [plain, subject] = f.accepted.Next();
  REQUIRE(plain >= 0);
  CHECK(subject.empty());
  // The server echoes; the client writes 4 MiB before reading any: the relay's backpressure
  // (and the socket buffers) must neither lose nor reorder a byte.
  std::thread echo([fd = plain] {
    char buffer[65536];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
      if (write(fd, buffer, static_cast<size_t>(n)) != n) {
        break;
      }
    }
  });
  std::string sent(4 << 20, '\0');
  for (size_t i = 0; i < sent.size(); ++i) {
    sent[i] = static_cast<char>((i * 7919) >> 3);
  }
  std::thread writer([&] { CHECK(client->Write(sent)); });
  std::string back = client->Read(sent.size());
  writer.join();
  CHECK(back.size() == sent.size());
  CHECK(back == sent);
  shutdown(plain, SHUT_RDWR);  // The server closes: the client sees the end.
  echo.join();
  close(plain);
  CHECK(client->Read(1).empty());
  CHECK(f.relay->stats().handshakes.load() == 1);
}

TEST_CASE("plaintext to the TLS port fails its handshake and reaches no server") {
  Fixture f(false);
  int fd = Dial(f.port);
  std::string request = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  char buffer[256];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    CHECK(std::string(buffer, 4) != "HTTP");  // A TLS alert at most, never an answer.
  }
  CHECK(n <= 0);  // Closed.
  close(fd);
  CHECK(f.accepted.Next(std::chrono::milliseconds(200)).first == -1);
  CHECK(f.relay->stats().failed_handshakes.load() == 1);
}

TEST_CASE("a client that never finishes its handshake is closed after the timeout") {
  TlsRelayOptions options;
  options.handshake_timeout_ns = 200'000'000;
  Fixture f(false, options);
  int fd = Dial(f.port);
  auto start = std::chrono::steady_clock::now();
  char buffer[16];
  CHECK(read(fd, buffer, sizeof(buffer)) <= 0);  // Closed (the read times out after 5 s).
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  close(fd);
  CHECK(f.relay->stats().failed_handshakes.load() == 1);
}

TEST_CASE("mutual TLS: the client certificate's subject comes with the connection") {
  Fixture f(true);
  std::unique_ptr<Client> alice = Connect(f.port, f.pki, &f.pki.alice);
  REQUIRE(alice->connected);
  auto [plain, subject] = f.accepted.Next();
  REQUIRE(plain >= 0);
  CHECK(subject == "CN=alice,O=ferry tests");
  CHECK(alice->Write("ping"));
  CHECK(ReadPlain(plain, 4) == "ping");
  close(plain);

  // No certificate: refused (TLS 1.3 clients may see it only at their first read).
  std::unique_ptr<Client> anonymous = Connect(f.port, f.pki, nullptr);
  if (anonymous->connected) {
    anonymous->Write("ping");
    CHECK(anonymous->Read(1).empty());
  }
  CHECK(f.accepted.Next(std::chrono::milliseconds(300)).first == -1);

  // A certificate from another CA: refused the same way.
  TestIdentity other_ca = ferry::testing::MakeIdentity("other CA", nullptr, "ca");
  TestIdentity mallory = ferry::testing::MakeIdentity("alice", &other_ca, "client", 5);
  std::unique_ptr<Client> forged = Connect(f.port, f.pki, &mallory);
  if (forged->connected) {
    forged->Write("ping");
    CHECK(forged->Read(1).empty());
  }
  CHECK(f.accepted.Next(std::chrono::milliseconds(300)).first == -1);
  CHECK(f.relay->stats().failed_handshakes.load() == 2);
}

TEST_CASE("a replaced certificate serves new connections; open ones keep theirs") {
  Fixture f(false);
  std::unique_ptr<Client> before = Connect(f.port, f.pki, nullptr);
  REQUIRE(before->connected);
  auto [old_plain, s1] = f.accepted.Next();
  CHECK(before->ServerSerial() == 2);
  TestIdentity renewed = ferry::testing::MakeIdentity("localhost", &f.pki.ca, "server", 9);
  Result<TlsContext> next = MakeServerContext({renewed.cert_pem, renewed.key_pem, ""});
  REQUIRE(next.ok());
  {
    std::lock_guard<std::mutex> lock(f.mu);
    f.context = *next;
  }
  std::unique_ptr<Client> after = Connect(f.port, f.pki, nullptr);
  REQUIRE(after->connected);
  auto [new_plain, s2] = f.accepted.Next();
  CHECK(after->ServerSerial() == 9);
  CHECK(before->Write("still"));
  CHECK(ReadPlain(old_plain, 5) == "still");
  close(old_plain);
  close(new_plain);
}

TEST_CASE("past max_connections a new connection is closed at once") {
  TlsRelayOptions options;
  options.max_connections = 2;
  Fixture f(false, options);
  std::unique_ptr<Client> a = Connect(f.port, f.pki, nullptr);
  std::unique_ptr<Client> b = Connect(f.port, f.pki, nullptr);
  REQUIRE(a->connected);
  REQUIRE(b->connected);
  std::unique_ptr<Client> c = Connect(f.port, f.pki, nullptr);
  CHECK_FALSE(c->connected);
  CHECK(f.relay->stats().refused_connections.load() == 1);
  auto [pa, sa] = f.accepted.Next();
  auto [pb, sb] = f.accepted.Next();
  close(pa);
  close(pb);
}

TEST_CASE("ALPN selects the listener's protocol only") {
  Fixture f(false);
  std::unique_ptr<Client> h2 = Connect(f.port, f.pki, nullptr, "h2");
  REQUIRE(h2->connected);
  CHECK(h2->Alpn().empty());  // An HTTP/1.1 listener never agrees to h2.
  std::unique_ptr<Client> h1 = Connect(f.port, f.pki, nullptr, "http/1.1");
  REQUIRE(h1->connected);
  CHECK(h1->Alpn() == "http/1.1");
  close(f.accepted.Next().first);
  close(f.accepted.Next().first);
}

TEST_CASE("garbage after the handshake ends the connection, and the server sees it end") {
  Fixture f(false);
  std::unique_ptr<Client> client = Connect(f.port, f.pki, nullptr);
  REQUIRE(client->connected);
  auto [plain, subject] = f.accepted.Next();
  REQUIRE(plain >= 0);
  // A record header announcing application data, then bytes that decrypt to nothing.
  std::string junk = std::string("\x17\x03\x03\x00\x40", 5) + std::string(64, '\x5a');
  REQUIRE(write(client->fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
  timeval tv{5, 0};
  setsockopt(plain, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char byte;
  CHECK(read(plain, &byte, 1) == 0);  // The relay closed the server's end: no data, EOF.
  close(plain);
}

TEST_CASE("a client that never reads holds a bounded amount of the server's answer") {
  Fixture f(false);
  std::unique_ptr<Client> client = Connect(f.port, f.pki, nullptr);
  REQUIRE(client->connected);
  auto [plain, subject] = f.accepted.Next();
  REQUIRE(plain >= 0);
  fcntl(plain, F_SETFL, fcntl(plain, F_GETFL) | O_NONBLOCK);
  // The server writes 64 MiB as fast as it is let; the client reads nothing. Reading pauses
  // while a chunk waits, so what is taken stops at the sockets' buffers and one chunk.
  std::string chunk(1 << 20, 'a');
  size_t taken = 0;
  auto start = std::chrono::steady_clock::now();
  while (taken < (size_t{64} << 20) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    ssize_t n = write(plain, chunk.data(), chunk.size());
    if (n > 0) {
      taken += static_cast<size_t>(n);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  MESSAGE("taken before the client read anything: " << taken << " bytes");
  CHECK(taken < (size_t{32} << 20));
  // The bytes are not lost: the client reads the start intact.
  CHECK(client->Read(4096) == std::string(4096, 'a'));
  close(plain);
}

TEST_CASE("handshakes left hanging hold slots only until the timeout") {
  TlsRelayOptions options;
  options.max_connections = 3;
  options.handshake_timeout_ns = 300'000'000;
  Fixture f(false, options);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(Dial(f.port));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::unique_ptr<Client> turned_away = Connect(f.port, f.pki, nullptr);
  CHECK_FALSE(turned_away->connected);  // Every slot held by a silent client.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::unique_ptr<Client> later = Connect(f.port, f.pki, nullptr);
  CHECK(later->connected);  // The silent ones were closed at the timeout.
  close(f.accepted.Next().first);
  for (int fd : idle) {
    close(fd);
  }
  CHECK(f.relay->stats().failed_handshakes.load() == 3);
}

TEST_CASE("a context refuses material that does not hold together") {
  TestPki pki;
  CHECK(MakeServerContext({"", pki.server.key_pem, ""}).error().message.find("tls_cert") !=
        std::string::npos);
  CHECK(MakeServerContext({pki.server.cert_pem, pki.alice.key_pem, ""})
            .error()
            .message.find("does not match") != std::string::npos);
  CHECK(MakeServerContext({pki.server.cert_pem, "garbage", ""}).error().message.find("tls_key") !=
        std::string::npos);
  CHECK(MakeServerContext({pki.server.cert_pem, pki.server.key_pem, "not pem"})
            .error()
            .message.find("tls_client_ca") != std::string::npos);
  CHECK(MakeServerContext({pki.server.cert_pem + pki.ca.cert_pem, pki.server.key_pem, ""}).ok());
}

}  // namespace
}  // namespace ferry::net
