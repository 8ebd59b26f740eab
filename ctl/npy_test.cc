// .npy files: round trips, the format's versions, and hostile files.
#include "ctl/npy.h"

#include <doctest/doctest.h>

#include <cstring>

namespace ferry::ctl {
namespace {

std::string Header(const std::string& dict, int major = 1) {
  std::string h = dict;
  size_t prefix = major == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  uint32_t n = static_cast<uint32_t>(h.size());
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) {
    out += static_cast<char>((n >> 16) & 0xff);
    out += static_cast<char>((n >> 24) & 0xff);
  }
  return out + h;
}

TEST_CASE("npy: a tensor survives encoding and parsing; versions 1 to 3") {
  client::Tensor t{"x", DType::kF32, {2, 3}, std::vector<uint8_t>(24)};
  for (size_t i = 0; i < 24; ++i) {
    t.bytes[i] = static_cast<uint8_t>(i);
  }
  std::string file = EncodeNpy(t);
  CHECK((file.size() - t.bytes.size()) % 64 == 0);
  Result<client::Tensor> back = ParseNpy(file, "x");
  REQUIRE(back.ok());
  CHECK(back->shape == Shape{2, 3});
  CHECK(back->bytes == t.bytes);
  for (int major : {2, 3}) {
    std::string v = Header("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", major) +
                    std::string(16, '\1');
    Result<client::Tensor> r = ParseNpy(v, "y");
    REQUIRE(r.ok());
    CHECK(r->dtype == DType::kI64);
    CHECK(r->shape == Shape{2});
  }
  // A scalar: shape ().
  Result<client::Tensor> scalar = ParseNpy(
      Header("{'descr': '<f8', 'fortran_order': False, 'shape': (), }") + std::string(8, '\0'),
      "s");
  REQUIRE(scalar.ok());
  CHECK(scalar->shape.empty());
}

TEST_CASE("npy: hostile files are refused with the reason") {
  struct Case {
    std::string bytes;
    std::string says;
  };
  std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  std::vector<Case> cases = {
      {"", "magic"},
      {"PK\x03\x04 zip file", "magic"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10), "version 4"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10), "exceeds"},
      {Header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }") + std::string(8, '\0'),
       "dtype"},
      {Header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }") + std::string(16, '\0'),
       "dtype"},
      {Header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }") + std::string(8, '\0'),
       "Fortran"},
      {Header("{'descr': '<f4', 'fortran_order': False, }") + std::string(8, '\0'), "shape"},
      {Header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, }") + std::string(8, '\0'),
       "not closed"},
      {Header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }") + std::string(8, '\0'),
       "non-negative"},
      {Header("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }"),
       "too many"},
      {Header(good) + std::string(7, '\0'), "holds 7 bytes"},
      {Header(good) + std::string(9, '\0'), "holds 9 bytes"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.says);
    Result<client::Tensor> r = ParseNpy(c.bytes, "x");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(c.says) != std::string::npos);
  }
  // A FIFO or a directory is not read.
  CHECK_FALSE(ReadNpy("/dev/zero", "x").ok());
  CHECK_FALSE(ReadNpy("/tmp", "x").ok());
}

}  // namespace
}  // namespace ferry::ctl
