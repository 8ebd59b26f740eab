// ferry-tls-bench [--json] [--rounds R] [--requests N] [--request-bytes B]: what TLS through
// the hook host's relay (net/tls_relay.h) costs a request, against the same exchange over
// plain TCP in the same run. One client connection sends a request of B bytes (16 KiB: the
// JSON body of one 784-float row) and reads a 512-byte answer from an echo-like server that
// reads the whole request first; N exchanges per round, rounds alternating plain and TLS,
// medians reported. Plain: the server reads the client's socket directly. TLS: the relay
// decrypts into a Unix socket pair the same server reads, as a hook host's HTTP server does.
// Handshakes: new connections per second, each a full TLS 1.3 handshake (ECDSA P-256), vs
// TCP connects. Certificates are made at start (tests/testing/test_certs.h).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "net/tls_relay.h"
#include "tests/testing/test_certs.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kAnswerBytes = 512;

bool ReadExactly(int fd, char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, out + got, n - got);
    if (r <= 0) {
      return false;
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

// The server: reads each request whole, answers kAnswerBytes, until the client leaves.
void Serve(int fd, size_t request_bytes) {
  std::vector<char> request(request_bytes);
  std::vector<char> answer(kAnswerBytes, 'a');
  while (ReadExactly(fd, request.data(), request.size())) {
    if (write(fd, answer.data(), answer.size()) != static_cast<ssize_t>(answer.size())) {
      break;
    }
  }
  close(fd);
}

int Listen(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  listen(fd, 128);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

int Dial(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

struct Stats {
  double p50_us = 0;
  double p99_us = 0;
  double per_second = 0;
};

Stats Summarize(std::vector<double> us, double seconds) {
  std::sort(us.begin(), us.end());
  Stats s;
  s.p50_us = us[us.size() / 2];
  s.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  s.per_second = static_cast<double>(us.size()) / seconds;
  return s;
}

// One round of `n` exchanges; `send` and `receive` move bytes on the client's connection.
template <typename Send, typename Receive>
Stats Exchanges(size_t n, size_t request_bytes, Send send, Receive receive) {
  std::vector<char> request(request_bytes, '0');
  std::vector<char> answer(kAnswerBytes);
  std::vector<double> us;
  us.reserve(n);
  auto round = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    auto start = Clock::now();
    if (!send(request.data(), request.size()) || !receive(answer.data(), answer.size())) {
      std::fprintf(stderr, "an exchange failed\n");
      std::exit(1);
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return Summarize(us, std::chrono::duration<double>(Clock::now() - round).count());
}

SSL_CTX* ClientContext(const ferry::testing::TestPki& pki) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), pki.ca.cert.get());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);  // Every handshake a full one.
  return ctx;
}

SSL* Handshake(SSL_CTX* ctx, uint16_t port) {
  int fd = Dial(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (fd < 0 || SSL_connect(ssl) != 1) {
    std::fprintf(stderr, "handshake failed\n");
    std::exit(1);
  }
  return ssl;
}

void CloseTls(SSL* ssl) {
  int fd = SSL_get_fd(ssl);
  SSL_free(ssl);
  close(fd);
}

nlohmann::json ToJson(const Stats& s) {
  return {{"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"per_second", s.per_second}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ferry-tls-bench: a request through the TLS relay against plain TCP");
  bool json = false;
  int rounds = 5;
  size_t requests = 2000;
  size_t request_bytes = 16 << 10;
  size_t handshakes = 200;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--rounds", rounds, "rounds of each, alternating")->check(CLI::Range(1, 100));
  app.add_option("--requests", requests, "exchanges per round")->check(CLI::Range(10, 10000000));
  app.add_option("--request-bytes", request_bytes, "bytes per request")
      ->check(CLI::Range(1, 64 << 20));
  app.add_option("--handshakes", handshakes, "new connections per round")
      ->check(CLI::Range(10, 100000));
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);

  ferry::testing::TestPki pki;
  auto context = ferry::net::MakeServerContext({pki.server.cert_pem, pki.server.key_pem, ""});
  if (!context.ok()) {
    std::fprintf(stderr, "%s\n", context.error().ToString().c_str());
    return 1;
  }
  uint16_t plain_port = 0;
  uint16_t tls_port = 0;
  int plain_listener = Listen(&plain_port);
  int tls_listener = Listen(&tls_port);
  std::thread plain_server([&] {
    while (true) {
      int fd = accept4(plain_listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        return;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::thread(Serve, fd, request_bytes).detach();
    }
  });
  ferry::net::TlsRelay relay([&] { return *context; }, {});
  relay.AddListener(tls_listener, "http/1.1", [&](int fd, const std::string&) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::thread(Serve, fd, request_bytes).detach();
  });
  if (!relay.Start().ok()) {
    return 1;
  }
  SSL_CTX* client_ctx = ClientContext(pki);

  std::vector<Stats> plain, tls;
  std::vector<double> tcp_connects, tls_handshakes;
  for (int r = 0; r < rounds; ++r) {
    int fd = Dial(plain_port);
    plain.push_back(Exchanges(
        requests, request_bytes,
        [fd](const char* p, size_t n) { return write(fd, p, n) == static_cast<ssize_t>(n); },
        [fd](char* p, size_t n) { return ReadExactly(fd, p, n); }));
    close(fd);
    SSL* ssl = Handshake(client_ctx, tls_port);
    tls.push_back(Exchanges(
        requests, request_bytes,
        [ssl](const char* p, size_t n) {
          return SSL_write(ssl, p, static_cast<int>(n)) == static_cast<int>(n);
        },
        [ssl](char* p, size_t n) {
          size_t got = 0;
          while (got < n) {
            int r = SSL_read(ssl, p + got, static_cast<int>(n - got));
            if (r <= 0) {
              return false;
            }
            got += static_cast<size_t>(r);
          }
          return true;
        }));
    CloseTls(ssl);
    auto start = Clock::now();
    for (size_t h = 0; h < handshakes; ++h) {
      close(Dial(plain_port));
    }
    tcp_connects.push_back(static_cast<double>(handshakes) /
                           std::chrono::duration<double>(Clock::now() - start).count());
    start = Clock::now();
    for (size_t h = 0; h < handshakes; ++h) {
      CloseTls(Handshake(client_ctx, tls_port));
    }
    tls_handshakes.push_back(static_cast<double>(handshakes) /
                             std::chrono::duration<double>(Clock::now() - start).count());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto median_of = [&](const std::vector<Stats>& runs, double Stats::*field) {
    std::vector<double> v;
    for (const Stats& s : runs) {
      v.push_back(s.*field);
    }
    return median(v);
  };
  Stats p{median_of(plain, &Stats::p50_us), median_of(plain, &Stats::p99_us),
          median_of(plain, &Stats::per_second)};
  Stats t{median_of(tls, &Stats::p50_us), median_of(tls, &Stats::p99_us),
          median_of(tls, &Stats::per_second)};
  double connects = median(tcp_connects);
  double handshakes_per_s = median(tls_handshakes);
  if (json) {
    std::printf("%s\n", nlohmann::json{{"request_bytes", request_bytes},
                                       {"plain", ToJson(p)},
                                       {"tls", ToJson(t)},
                                       {"p50_added_us", t.p50_us - p.p50_us},
                                       {"throughput_ratio", t.per_second / p.per_second},
                                       {"tcp_connects_per_second", connects},
                                       {"tls_handshakes_per_second", handshakes_per_s}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%-22s %10s %10s %12s\n", "", "p50 us", "p99 us", "exchanges/s");
    std::printf("%-22s %10.1f %10.1f %12.0f\n", "plain TCP", p.p50_us, p.p99_us, p.per_second);
    std::printf("%-22s %10.1f %10.1f %12.0f\n", "TLS through the relay", t.p50_us, t.p99_us,
                t.per_second);
    std::printf("added p50 %.1f us; throughput ratio %.2f\n", t.p50_us - p.p50_us,
                t.per_second / p.per_second);
    std::printf("new connections/s: TCP %.0f, TLS handshakes %.0f\n", connects, handshakes_per_s);
  }
  relay.Stop();
  SSL_CTX_free(client_ctx);
  shutdown(plain_listener, SHUT_RDWR);
  close(plain_listener);
  plain_server.join();
  close(tls_listener);
  return 0;
}
