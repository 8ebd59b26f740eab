// Converting program outputs from fp32 to the type a manifest declares: rounding, saturation,
// NaN, and FP16 against its exact inverse.
#include "model/dtype_convert.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "model/dtype.h"

namespace ferry {
namespace {

template <typename T>
std::vector<T> From(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  REQUIRE(ConvertFromFloat32(dtype, values, bytes).ok());
  std::vector<T> out(values.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_CASE("integers: rounded to nearest, saturated to the type's range, NaN as 0") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(From<int64_t>(DType::kI64, {0, 1.4f, 1.6f, -2.5f, 3e19f, -3e19f, nan, inf}) ==
        std::vector<int64_t>{0, 1, 2, -2, INT64_MAX, INT64_MIN, 0, INT64_MAX});
  CHECK(From<int32_t>(DType::kI32, {2147483648.f, -2147483904.f, 16777216.f}) ==
        std::vector<int32_t>{INT32_MAX, INT32_MIN, 16777216});
  CHECK(From<uint8_t>(DType::kU8, {-1, 255.4f, 256, 7}) == std::vector<uint8_t>{0, 255, 255, 7});
  CHECK(From<int8_t>(DType::kI8, {-129, 127.6f, -3}) == std::vector<int8_t>{-128, 127, -3});
  CHECK(From<uint64_t>(DType::kU64, {-5, 1e20f}) == std::vector<uint64_t>{0, UINT64_MAX});
  CHECK(From<uint8_t>(DType::kBool, {0, -0.f, 0.5f, -3, nan}) ==
        std::vector<uint8_t>{0, 0, 1, 1, 1});
  CHECK(From<double>(DType::kF64, {1.5f, -inf}) == std::vector<double>{1.5, -INFINITY});
}

TEST_CASE("FP16: every half survives the round trip; ties go to even; overflow is infinity") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto half = static_cast<uint16_t>(h);
    float f = F16ToFloat(half);
    if (std::isnan(f)) {
      CHECK(std::isnan(F16ToFloat(FloatToF16(f))));
    } else if (FloatToF16(f) != half) {
      FAIL("half " << h << " came back as " << FloatToF16(f));
    }
  }
  CHECK(FloatToF16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // Tie, even below: 1.0.
  CHECK(FloatToF16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // Tie, even above.
  CHECK(FloatToF16(65520.f) == 0x7c00);  // Rounds past the largest half (65504).
  CHECK(FloatToF16(65519.f) == 0x7bff);
  CHECK(FloatToF16(std::ldexp(1.0f, -25)) == 0x0000);  // Tie between 0 and the least: 0.
  CHECK(FloatToF16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(FloatToF16(-1e-10f) == 0x8000);
  std::vector<uint16_t> bf = From<uint16_t>(DType::kBF16, {1.0f, -2.0f});
  CHECK(bf == std::vector<uint16_t>{0x3f80, 0xc000});
}

TEST_CASE("sizes must agree, and only numeric types convert") {
  std::vector<float> values = {1, 2};
  std::vector<uint8_t> out(15);
  CHECK_FALSE(ConvertFromFloat32(DType::kI64, values, out).ok());
  std::vector<uint8_t> bytes(2);
  CHECK_FALSE(ConvertFromFloat32(DType::kF8E4M3, values, bytes).ok());
}

TEST_CASE("BYTES: exactly `count` length-prefixed elements, nothing more, nothing lying") {
  auto check = [](std::string bytes, uint64_t count) {
    return CheckBytesTensor(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                            count);
  };
  CHECK(check("", 0).ok());
  CHECK(check(std::string("\0\0\0\0", 4), 1).ok());
  CHECK(check(std::string("\2\0\0\0ab\1\0\0\0c", 11), 2).ok());
  CHECK_FALSE(check(std::string("\2\0\0\0ab", 6), 2).ok());        // One element short.
  CHECK_FALSE(check(std::string("\2\0\0\0ab", 6), 0).ok());        // Bytes after the last.
  CHECK_FALSE(check(std::string("\3\0\0\0ab", 6), 1).ok());        // A length past the end.
  CHECK_FALSE(check(std::string("\2\0\0", 3), 1).ok());            // A truncated length.
  CHECK_FALSE(check(std::string("\xff\xff\xff\xff", 4), 1).ok());  // 4 GiB claimed.
  CHECK(TensorByteSize(DType::kBytes, std::vector<int64_t>{2}) == std::nullopt);
  CHECK(DTypeFromKServe("BYTES") == DType::kBytes);
  CHECK(DTypeFromSafetensors("") == std::nullopt);
}

}  // namespace
}  // namespace ferry
