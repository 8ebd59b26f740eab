// A read-only memory mapping of a whole file; weights are read in place, never copied.
//
// Thread safety: immutable after Open; safe for concurrent use.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/result.h"

namespace ferry {

class MappedFile {
 public:
  // NOT_FOUND naming the path when it cannot be opened; INVALID_ARGUMENT when it is not a
  // regular file.
  static Result<MappedFile> Open(const std::string& path);
  // No file: zero bytes (a pipeline bundle's absent weights).
  static MappedFile Empty() { return MappedFile("", nullptr, 0); }

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_ = nullptr;  // nullptr for an empty file.
  size_t size_ = 0;
};

}  // namespace ferry
