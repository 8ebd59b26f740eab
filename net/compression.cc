#include "net/compression.h"

#include <strings.h>
#include <zlib.h>

#include <cstring>

namespace ferry::net {
namespace {

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) {
    return {};
  }
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::optional<Encoding> ParseContentEncoding(std::string_view value) {
  value = Trim(value);
  if (value.empty() || IEquals(value, "identity")) {
    return Encoding::kIdentity;
  }
  if (IEquals(value, "gzip") || IEquals(value, "x-gzip")) {
    return Encoding::kGzip;
  }
  if (IEquals(value, "deflate")) {
    return Encoding::kDeflate;
  }
  return std::nullopt;
}

Encoding ChooseEncoding(std::string_view accept) {
  bool gzip = false;
  bool deflate = false;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view item = Trim(accept.substr(0, comma));
    accept.remove_prefix(comma == std::string_view::npos ? accept.size() : comma + 1);
    std::string_view name = Trim(item.substr(0, item.find(';')));
    bool refused =
        item.find("q=0") != std::string_view::npos && item.find("q=0.") == std::string_view::npos;
    if (refused) {
      continue;
    }
    gzip |= IEquals(name, "gzip");
    deflate |= IEquals(name, "deflate");
  }
  return gzip ? Encoding::kGzip : deflate ? Encoding::kDeflate : Encoding::kIdentity;
}

std::string_view EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kGzip:
      return "gzip";
    case Encoding::kDeflate:
      return "deflate";
    default:
      return "identity";
  }
}

Result<std::string> Inflate(std::string_view body, Encoding encoding, size_t max_bytes,
                            uint64_t max_ratio) {
  if (encoding == Encoding::kIdentity) {
    return std::string(body);
  }
  z_stream z{};
  // 15 + 32: zlib or gzip, detected from the header (some clients send either for either).
  if (inflateInit2(&z, 15 + 32) != Z_OK) {
    return Internal("zlib inflateInit2 failed");
  }
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = static_cast<uInt>(body.size());
  char chunk[65536];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof(chunk);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&z);
      return InvalidArgument(std::string("the ") + std::string(EncodingName(encoding)) +
                             " body is corrupt or truncated");
    }
    size_t produced = sizeof(chunk) - z.avail_out;
    if (out.size() + produced > max_bytes) {
      inflateEnd(&z);
      return ResourceExhausted("the " + std::string(EncodingName(encoding)) +
                               " body inflates past the request limit of " +
                               std::to_string(max_bytes) + " bytes");
    }
    out.append(chunk, produced);
    if (max_ratio != 0 && out.size() > kInflateRatioFloor && out.size() / max_ratio > body.size()) {
      inflateEnd(&z);
      return ResourceExhausted("the " + std::string(EncodingName(encoding)) +
                               " body inflates more than " + std::to_string(max_ratio) +
                               " times its " + std::to_string(body.size()) +
                               " bytes ([frontend] max_inflate_ratio)");
    }
    if (rc == Z_OK && z.avail_in == 0 && produced == 0) {
      inflateEnd(&z);
      return InvalidArgument(std::string("the ") + std::string(EncodingName(encoding)) +
                             " body is truncated");
    }
  }
  bool trailing = z.avail_in != 0;
  inflateEnd(&z);
  if (trailing) {
    return InvalidArgument("bytes follow the end of the compressed body");
  }
  return out;
}

std::string Deflate(std::string_view body, Encoding encoding) {
  if (encoding == Encoding::kIdentity) {
    return std::string(body);
  }
  z_stream z{};
  deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, encoding == Encoding::kGzip ? 15 + 16 : 15, 8,
               Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, static_cast<uLong>(body.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = static_cast<uInt>(body.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace ferry::net
