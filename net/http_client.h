// A blocking HTTP/1.1 client for ferry's own tools (ferryctl infer, the node benchmark, the
// end-to-end tests): one keep-alive connection, one request at a time, every wait bounded.
// Responses are parsed by Boost.Beast's parser, bounded like the server's requests.
//
// Thread safety: one thread per client.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace ferry::net {

struct HttpAnswer {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  const std::string* Header(std::string_view name) const;  // Case-insensitive.
};

class HttpClient {
 public:
  // "127.0.0.1:8000", "localhost:8000", "[::1]:8000". UNAVAILABLE naming the address when the
  // connection fails or takes longer than `timeout_ms`.
  static Result<HttpClient> Connect(const std::string& address, int timeout_ms = 10'000);
  HttpClient(HttpClient&& other) noexcept;
  HttpClient& operator=(HttpClient&& other) noexcept;
  ~HttpClient();

  // UNAVAILABLE when the connection fails, closes before a whole answer, or the answer takes
  // longer than the timeout; INTERNAL for an answer that is not HTTP. After an error the
  // client is closed; Connect again.
  Result<HttpAnswer> Request(const std::string& method, const std::string& target,
                             const std::string& body = "",
                             const std::vector<std::pair<std::string, std::string>>& headers = {});
  bool connected() const { return fd_ >= 0; }

 private:
  HttpClient() = default;
  void Close();
  int fd_ = -1;
  int timeout_ms_ = 10'000;
  std::string address_;
  std::string leftover_;  // Bytes read past the last answer.
};

}  // namespace ferry::net
