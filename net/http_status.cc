// The status lines the front end answers with.
#include "net/http_server.h"

namespace ferry::net {

std::string_view StatusText(int status) {
  switch (status) {
    case 100:
      return "100 Continue";
    case 200:
      return "200 OK";
    case 400:
      return "400 Bad Request";
    case 401:
      return "401 Unauthorized";
    case 403:
      return "403 Forbidden";
    case 404:
      return "404 Not Found";
    case 405:
      return "405 Method Not Allowed";
    case 408:
      return "408 Request Timeout";
    case 413:
      return "413 Payload Too Large";
    case 415:
      return "415 Unsupported Media Type";
    case 429:
      return "429 Too Many Requests";
    case 431:
      return "431 Request Header Fields Too Large";
    case 499:
      return "499 Client Closed Request";
    case 500:
      return "500 Internal Server Error";
    case 501:
      return "501 Not Implemented";
    case 503:
      return "503 Service Unavailable";
    case 504:
      return "504 Gateway Timeout";
    default:
      return status < 500 ? "400 Bad Request" : "500 Internal Server Error";
  }
}

}  // namespace ferry::net
