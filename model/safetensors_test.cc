#include "model/safetensors.h"

#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

using testing::SafetensorsBytes;

Result<SafetensorsIndex> Parse(const std::string& file) {
  return ParseSafetensors(std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size()),
                          "w.safetensors");
}

std::string ErrorOf(const std::string& file) {
  Result<SafetensorsIndex> result = Parse(file);
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().code == ErrorCode::kInvalidArgument);
  CHECK(result.error().message.rfind("w.safetensors: ", 0) == 0);
  return result.error().message;
}

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

const std::string kGoodHeader =
    R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
    R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}  )";

TEST_CASE("a well-formed file is indexed in offset order with its metadata") {
  Result<SafetensorsIndex> index = Parse(SafetensorsBytes(kGoodHeader, std::string(16, 'x')));
  REQUIRE_MESSAGE(index.ok(), (index.ok() ? "" : index.error().message));
  REQUIRE(index->tensors.size() == 2);
  CHECK(index->tensors[0].name == "a");
  CHECK(index->tensors[1].name == "b");
  CHECK(index->tensors[1].begin == 8);
  CHECK(index->metadata.at("k") == "v");
  CHECK(index->data_start == 8 + kGoodHeader.size());
  CHECK(index->Find("b")->shape == std::vector<int64_t>{2});
  CHECK(index->Find("c") == nullptr);
}

TEST_CASE("scalars, empty tensors and an empty header are allowed") {
  CHECK(Parse(SafetensorsBytes("{}", "")).ok());
  CHECK(Parse(SafetensorsBytes(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                               R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]}})",
                               std::string(8, 'x')))
            .ok());
}

TEST_CASE("truncated files and headers are rejected without reading past the end") {
  CHECK(Contains(ErrorOf("abc"), "too short for the 8-byte header length"));
  std::string full = SafetensorsBytes(kGoodHeader, std::string(16, 'x'));
  CHECK(Contains(ErrorOf(full.substr(0, 20)), "runs past the end"));
  CHECK(Contains(ErrorOf(full.substr(0, full.size() - 1)), "data buffer holds 15"));
}

TEST_CASE("an oversized header length is rejected before any allocation") {
  std::string file(8, '\xff');
  file += "{}";
  CHECK(Contains(ErrorOf(file), "exceeds the limit"));
  std::string just_over = SafetensorsBytes("{}", "");
  uint64_t n = kSafetensorsMaxHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) {
    just_over[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  CHECK(Contains(ErrorOf(just_over), "exceeds the limit"));
}

TEST_CASE("overlapping and holey offsets are rejected") {
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        std::string(12, 'x'))),
               "overlap"));
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                        std::string(8, 'x'))),
               "(hole)"));
}

TEST_CASE("bytes after the last tensor are refused: the tensors must cover the whole buffer") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(Parse(SafetensorsBytes(header, std::string(8, 'x'))).ok());
  CHECK(Contains(ErrorOf(SafetensorsBytes(header, std::string(9, 'x'))),
                 "tensors cover 8 bytes but the data buffer holds 9"));
  CHECK(Contains(ErrorOf(SafetensorsBytes("{}", std::string(4, 'x'))),
                 "tensors cover 0 bytes but the data buffer holds 4"));
}

TEST_CASE("a header that lies about sizes is rejected") {
  // Shape says 3 floats, offsets say 2.
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                        std::string(8, 'x'))),
               "span 8 bytes but dtype and shape need 12"));
  // Shape product overflows.
  CHECK(Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],)"
                                          R"("data_offsets":[0,8]}})",
                                          std::string(8, 'x'))),
                 "overflows"));
  CHECK(Contains(
      ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                               std::string(4, 'x'))),
      "not a non-negative integer"));
  // A negative offset is refused as such (not read as a huge unsigned value).
  CHECK(Contains(
      ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[-1,0]}})", "")),
      "data_offsets must be [BEGIN, END] of non-negative integers"));
  CHECK(Contains(
      ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,-1]}})", "")),
      "data_offsets must be [BEGIN, END] of non-negative integers"));
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                                        std::string(8, 'x'))),
               "before begin"));
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})",
                                        std::string(4, 'x'))),
               "unknown dtype 'Q7'"));
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})",
                                        std::string(2, 'x'))),
               "not a whole number of bytes"));
  CHECK(Contains(
      ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
                               std::string(4, 'x'))),
      "unknown field 'x'"));
}

TEST_CASE("malformed JSON, non-UTF-8, duplicate keys and bad metadata are rejected") {
  CHECK(Contains(ErrorOf(SafetensorsBytes("[1,2]", "")), "does not begin with '{'"));
  CHECK(Contains(ErrorOf(SafetensorsBytes("{\"a\":", "")), "not valid UTF-8 JSON"));
  CHECK(Contains(ErrorOf(SafetensorsBytes("{\"\xff\xfe\":{}}", "")), "not valid UTF-8 JSON"));
  CHECK(
      Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                        std::string(8, 'x'))),
               "duplicate key 'a'"));
  CHECK(Contains(ErrorOf(SafetensorsBytes(R"({"__metadata__":{"k":1}})", "")), "is not a string"));
  CHECK(Contains(ErrorOf(SafetensorsBytes(R"({"__metadata__":[]})", "")),
                 "__metadata__ must be an object"));
  CHECK(Contains(ErrorOf(SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[1],)"
                                          R"("data_offsets":[0,4.0]}})",
                                          std::string(4, 'x'))),
                 "data_offsets must be"));
}

TEST_CASE("a file on disk is mapped and its tensors read in place") {
  testing::TempDir dir;
  std::string data(16, '\0');
  float values[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  std::memcpy(data.data(), values, sizeof(values));
  testing::WriteFile(dir / "w.safetensors", SafetensorsBytes(kGoodHeader, data));
  Result<SafetensorsFile> file = SafetensorsFile::Open(dir / "w.safetensors");
  REQUIRE(file.ok());
  std::span<const uint8_t> b = file->Data(*file->index().Find("b"));
  REQUIRE(b.size() == 8);
  float first = 0;
  std::memcpy(&first, b.data(), 4);
  CHECK(first == 3.25f);
  CHECK(SafetensorsFile::Open(dir / "missing").error().code == ErrorCode::kNotFound);
  CHECK(SafetensorsFile::Open(dir.path()).error().code == ErrorCode::kInvalidArgument);
}

TEST_CASE("an array of more than 16 elements is refused while parsing, whatever they are") {
  // The SAX parser counts every element kind; a shape of 17 would also fail later, with
  // another message, so the message proves the early refusal.
  for (std::string element : {"1", "-1", "1.5", "\"a\"", "true", "null", "[]", "{}"}) {
    CAPTURE(element);
    std::string shape;
    for (int i = 0; i < 17; ++i) {
      shape += (i ? "," : "") + element;
    }
    std::string header = R"({"a":{"dtype":"U8","shape":[)" + shape + R"(],"data_offsets":[0,0]}})";
    CHECK(Contains(ErrorOf(SafetensorsBytes(header, "")), "an array with more than 16 elements"));
  }
  std::string sixteen;
  for (int i = 0; i < 16; ++i) {
    sixteen += i ? ",1" : "1";
  }
  CHECK(Parse(SafetensorsBytes(
                  R"({"a":{"dtype":"U8","shape":[)" + sixteen + R"(],"data_offsets":[0,1]}})", "x"))
            .ok());
}

TEST_CASE("what EncodeSafetensors writes parses back tensor for tensor") {
  std::vector<Float32Tensor> tensors = {
      {"w", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {3}, {-1.5f, 0, 7}}, {"scale", {}, {0.25f}}};
  std::string file = EncodeSafetensors(tensors);
  auto bytes = std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  Result<SafetensorsIndex> index = ParseSafetensors(bytes, "encoded");
  REQUIRE_MESSAGE(index.ok(), index.error().message);
  REQUIRE(index->tensors.size() == 3);
  for (const Float32Tensor& t : tensors) {
    const TensorInfo* info = index->Find(t.name);
    REQUIRE(info != nullptr);
    CHECK(info->dtype == DType::kF32);
    CHECK(info->shape == t.shape);
    REQUIRE(info->bytes() == t.values.size() * 4);
    CHECK(std::memcmp(file.data() + index->data_start + info->begin, t.values.data(),
                      info->bytes()) == 0);
  }
  std::string empty = EncodeSafetensors({});
  Result<SafetensorsIndex> none = ParseSafetensors(
      std::span(reinterpret_cast<const uint8_t*>(empty.data()), empty.size()), "empty");
  REQUIRE(none.ok());
  CHECK(none->tensors.empty());
}

}  // namespace
}  // namespace ferry
