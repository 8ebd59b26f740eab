// A JSON text written into one growing buffer: objects, arrays, keys, escaped strings,
// integers, and a tensor's elements as numbers (std::to_chars: the shortest text that reads
// back as the same value; FP32 as FP32, not widened to FP64's 17 digits; NaN and infinities
// as null, which JSON has no numbers for).
//
// The caller nests Begin/End correctly and writes a Key before each value in an object
// (not checked). Strings that are not valid UTF-8 have each byte >= 0x80 written as U+FFFD,
// so the output is always valid JSON whatever the text came from.
//
// Thread safety: one writer per thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "model/dtype.h"

namespace ferry::frontend {

class JsonWriter {
 public:
  void Reserve(size_t bytes) { out_.reserve(bytes); }

  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  // The key of the next value in an object.
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Int(int64_t value);
  // An array of the elements in `bytes` read as `dtype` (one of the numeric types or BOOL;
  // anything else is written as an empty array).
  JsonWriter& Elements(DType dtype, std::span<const uint8_t> bytes);

  std::string Take() { return std::move(out_); }

 private:
  JsonWriter& Open(char c);
  JsonWriter& Close(char c);
  void Separate();

  std::string out_;
  bool first_ = true;  // Nothing written yet in the current array or object (or after a key).
};

}  // namespace ferry::frontend
