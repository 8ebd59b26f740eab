#include "hookhost/frontend/json_writer.h"

#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <cstring>

namespace ferry::frontend {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Appends `v` as JSON: integers exactly, floats in their shortest round-trip form.
template <typename T>
void AppendNumber(std::string* out, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) {
      out->append("null");
      return;
    }
  }
  char buffer[48];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  if constexpr (std::is_floating_point_v<T>) {
    // A large integral value's shortest form is a long run of digits ("118446744073709551616"),
    // which many readers take for an integer and some refuse as one out of range.
    if (end - buffer > 16 &&
        std::string_view(buffer, end - buffer).find_first_of(".e") == std::string_view::npos) {
      end = std::to_chars(buffer, buffer + sizeof(buffer), v, std::chars_format::scientific).ptr;
    }
  }
  out->append(buffer, static_cast<size_t>(end - buffer));
}

template <typename T>
void AppendAll(std::string* out, std::span<const uint8_t> bytes) {
  for (size_t i = 0; i + sizeof(T) <= bytes.size(); i += sizeof(T)) {
    if (i != 0) {
      out->push_back(',');
    }
    AppendNumber(out, Load<T>(bytes.data() + i));
  }
}

void AppendEscaped(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  bool utf8 = simdjson::validate_utf8(s.data(), s.size());
  out->push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else if (c >= 0x80 && !utf8) {
      out->append("\\ufffd");
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

}  // namespace

void JsonWriter::Separate() {
  if (!first_) {
    out_.push_back(',');
  }
  first_ = false;
}

JsonWriter& JsonWriter::Open(char c) {
  Separate();
  out_.push_back(c);
  first_ = true;
  return *this;
}

JsonWriter& JsonWriter::Close(char c) {
  out_.push_back(c);
  first_ = false;
  return *this;
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  Separate();
  AppendEscaped(&out_, key);
  out_.push_back(':');
  first_ = true;  // The value follows without a comma.
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  Separate();
  AppendEscaped(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  Separate();
  AppendNumber(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Elements(DType dtype, std::span<const uint8_t> bytes) {
  BeginArray();
  switch (dtype) {
    case DType::kBool:
      for (size_t i = 0; i < bytes.size(); ++i) {
        out_.append(i == 0 ? "" : ",").append(bytes[i] != 0 ? "true" : "false");
      }
      break;
    case DType::kU8:
      AppendAll<uint8_t>(&out_, bytes);
      break;
    case DType::kI8:
      AppendAll<int8_t>(&out_, bytes);
      break;
    case DType::kU16:
      AppendAll<uint16_t>(&out_, bytes);
      break;
    case DType::kI16:
      AppendAll<int16_t>(&out_, bytes);
      break;
    case DType::kU32:
      AppendAll<uint32_t>(&out_, bytes);
      break;
    case DType::kI32:
      AppendAll<int32_t>(&out_, bytes);
      break;
    case DType::kU64:
      AppendAll<uint64_t>(&out_, bytes);
      break;
    case DType::kI64:
      AppendAll<int64_t>(&out_, bytes);
      break;
    case DType::kF32:
      AppendAll<float>(&out_, bytes);
      break;
    case DType::kF64:
      AppendAll<double>(&out_, bytes);
      break;
    default:
      break;
  }
  return EndArray();
}

}  // namespace ferry::frontend
