// Opening files ferry reads from operators and bundles, treating them as hostile: the path's
// type is checked first (stat, or lstat for bundle files: opening a device can have side
// effects), then it is opened with O_NONBLOCK (a FIFO swapped in cannot block the open) and,
// for bundle files, O_NOFOLLOW (the last component may not be a symlink), and fstat on the
// descriptor must show the same regular file (device and inode), so the check and the use
// cannot be raced apart.
//
// Thread safety: pure functions over the filesystem; safe for concurrent use.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "common/result.h"

namespace ferry {

enum class Symlinks { kFollow, kRefuse };

// An open, read-only descriptor of a regular file (O_CLOEXEC) and its fstat. The caller
// closes it. NOT_FOUND when it cannot be opened; INVALID_ARGUMENT naming the path when it is
// not a regular file or (kRefuse) is a symlink.
struct OpenedFile {
  int fd = -1;
  struct stat st {};
};
Result<OpenedFile> OpenRegularFile(const std::string& path, Symlinks symlinks);

// Reads a whole regular file of at most `max_bytes` (checked on the descriptor before
// reading, and again while reading, so a file that grows is still bounded).
Result<std::string> ReadRegularFile(const std::string& path, size_t max_bytes, Symlinks symlinks);

}  // namespace ferry
