#include "net/http_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ferry::net {

namespace http = boost::beast::http;

const std::string* HttpAnswer::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0) {
      return &v;
    }
  }
  return nullptr;
}

Result<HttpClient> HttpClient::Connect(const std::string& address, int timeout_ms) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("'" + address + "' is not HOST:PORT");
  }
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Unavailable("cannot resolve " + address);
  }
  HttpClient client;
  client.address_ = address;
  client.timeout_ms_ = timeout_ms;
  int err = ECONNREFUSED;
  for (addrinfo* a = found; a != nullptr && client.fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t len = sizeof(error);
      if (poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0) {
        rc = error == 0 ? 0 : -1;
        errno = error;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      client.fd_ = fd;
    } else {
      err = errno;
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (client.fd_ < 0) {
    return Unavailable("cannot connect to " + address + ": " + std::strerror(err));
  }
  return client;
}

HttpClient::HttpClient(HttpClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      timeout_ms_(other.timeout_ms_),
      address_(std::move(other.address_)),
      leftover_(std::move(other.leftover_)) {}

HttpClient& HttpClient::operator=(HttpClient&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    timeout_ms_ = other.timeout_ms_;
    address_ = std::move(other.address_);
    leftover_ = std::move(other.leftover_);
  }
  return *this;
}

HttpClient::~HttpClient() { Close(); }

void HttpClient::Close() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  leftover_.clear();
}

Result<HttpAnswer> HttpClient::Request(
    const std::string& method, const std::string& target, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  if (fd_ < 0) {
    return Unavailable("not connected to " + address_);
  }
  std::string out = method + " " + target + " HTTP/1.1\r\nHost: " + address_ + "\r\n";
  for (const auto& [name, value] : headers) {
    out += name + ": " + value + "\r\n";
  }
  if (!body.empty() || method == "POST") {
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  out += "\r\n";
  out += body;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  auto wait = [&](short events) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd_, events, 0};
    return left > 0 && poll(&p, 1, static_cast<int>(left)) == 1;
  };
  for (size_t sent = 0; sent < out.size();) {
    ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait(POLLOUT)) {
      continue;
    } else {
      Close();
      return Unavailable("connection to " + address_ + " failed while sending");
    }
  }
  http::response_parser<http::string_body> parser;
  parser.header_limit(1 << 20);
  parser.body_limit(uint64_t{4} << 30);
  parser.eager(true);
  if (method == "HEAD") {
    parser.skip(true);
  }
  std::string in = std::move(leftover_);
  leftover_.clear();
  char buffer[65536];
  while (true) {
    if (!in.empty()) {
      boost::beast::error_code ec;
      size_t used = parser.put(boost::asio::buffer(in.data(), in.size()), ec);
      in.erase(0, used);
      if (ec && ec != http::error::need_more) {
        Close();
        return Internal("the answer from " + address_ + " is not HTTP: " + ec.message());
      }
      if (parser.is_done()) {
        break;
      }
      if (!ec && used > 0) {
        continue;
      }
    }
    ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n > 0) {
      in.append(buffer, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait(POLLIN)) {
      continue;
    } else if (n == 0 && parser.got_some() && !parser.is_done()) {
      boost::beast::error_code ec;
      parser.put_eof(ec);  // An answer delimited by the close.
      if (!ec && parser.is_done()) {
        break;
      }
      Close();
      return Unavailable("connection to " + address_ + " closed mid-answer");
    } else {
      Close();
      return Unavailable(n == 0 ? "connection to " + address_ + " closed without an answer"
                                : "no answer from " + address_ + " in time");
    }
  }
  leftover_ = std::move(in);
  http::response<http::string_body> message = parser.release();
  HttpAnswer answer;
  answer.status = static_cast<int>(message.result_int());
  for (const auto& field : message) {
    answer.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  answer.body = std::move(message.body());
  if (!message.keep_alive()) {
    Close();
  }
  return answer;
}

}  // namespace ferry::net
