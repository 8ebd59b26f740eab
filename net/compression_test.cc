// Compressed bodies: round trips both ways, the Accept-Encoding choice, and hostile streams
// (a zip bomb, truncation, corruption, trailing bytes).
#include "net/compression.h"

#include <doctest/doctest.h>
#include <zlib.h>

namespace ferry::net {
namespace {

TEST_CASE("compression: gzip and deflate round trip; encodings parsed and chosen") {
  std::string text;
  for (int i = 0; i < 10000; ++i) {
    text += std::to_string(i * 7919 % 1000) + ",";
  }
  for (Encoding e : {Encoding::kGzip, Encoding::kDeflate}) {
    std::string packed = Deflate(text, e);
    CHECK(packed.size() < text.size());
    Result<std::string> back = Inflate(packed, e, 1 << 20);
    REQUIRE(back.ok());
    CHECK(*back == text);
  }
  CHECK(ParseContentEncoding("GZIP") == Encoding::kGzip);
  CHECK(ParseContentEncoding(" deflate ") == Encoding::kDeflate);
  CHECK(ParseContentEncoding("identity") == Encoding::kIdentity);
  CHECK_FALSE(ParseContentEncoding("br").has_value());
  CHECK(ChooseEncoding("deflate, gzip;q=0.5") == Encoding::kGzip);
  CHECK(ChooseEncoding("gzip;q=0, deflate") == Encoding::kDeflate);
  CHECK(ChooseEncoding("br") == Encoding::kIdentity);
  CHECK(ChooseEncoding("") == Encoding::kIdentity);
}

TEST_CASE("compression: a zip bomb is refused at the limit, never inflated whole") {
  std::string zeros(64 << 20, '\0');  // 64 MiB of zeros packs into ~64 KiB.
  std::string bomb = Deflate(zeros, Encoding::kGzip);
  CHECK(bomb.size() < (1 << 20));
  Result<std::string> r = Inflate(bomb, Encoding::kGzip, 1 << 20);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kResourceExhausted);
  CHECK(r.error().message.find("inflates past") != std::string::npos);
}

TEST_CASE("compression: a bomb past the ratio stops there; small or plain bodies pass") {
  std::string zeros(8 << 20, '0');
  std::string bomb = Deflate(zeros, Encoding::kGzip);
  REQUIRE(zeros.size() / bomb.size() > 100);
  Result<std::string> r = Inflate(bomb, Encoding::kGzip, 64 << 20, 100);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kResourceExhausted);
  CHECK(r.error().message.find("more than 100 times") != std::string::npos);
  CHECK(Inflate(bomb, Encoding::kGzip, 64 << 20, 0)->size() == zeros.size());  // No ratio.
  // Under the floor any ratio passes: a small tensor of zeros.
  std::string small(kInflateRatioFloor, '0');
  CHECK(Inflate(Deflate(small, Encoding::kGzip), Encoding::kGzip, 64 << 20, 100)->size() ==
        small.size());
  // Text of real numbers, 3 MiB, compresses far less than 100 times.
  std::string numbers;
  for (int i = 0; numbers.size() < (3u << 20); ++i) {
    numbers += std::to_string(i * 0.7312 + 1e-3 * (i % 97)) + ",";
  }
  CHECK(Inflate(Deflate(numbers, Encoding::kDeflate), Encoding::kDeflate, 64 << 20, 100)->size() ==
        numbers.size());
}

TEST_CASE("compression: truncated, corrupt and over-long streams are errors") {
  std::string packed = Deflate(std::string(5000, 'a') + "tail", Encoding::kGzip);
  Result<std::string> truncated =
      Inflate(packed.substr(0, packed.size() / 2), Encoding::kGzip, 1 << 20);
  REQUIRE_FALSE(truncated.ok());
  CHECK(truncated.error().message.find("truncated") != std::string::npos);
  std::string corrupt = packed;
  corrupt[corrupt.size() / 2] ^= 0x55;
  corrupt[corrupt.size() / 2 + 1] ^= 0x55;
  CHECK_FALSE(Inflate(corrupt, Encoding::kGzip, 1 << 20).ok());
  CHECK_FALSE(Inflate("not compressed at all", Encoding::kDeflate, 1 << 20).ok());
  CHECK_FALSE(Inflate("", Encoding::kGzip, 1 << 20).ok());
  Result<std::string> trailing = Inflate(packed + "junk", Encoding::kGzip, 1 << 20);
  REQUIRE_FALSE(trailing.ok());
  CHECK(trailing.error().message.find("follow") != std::string::npos);
}

}  // namespace
}  // namespace ferry::net
