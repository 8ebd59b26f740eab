#include "common/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry {

Result<OpenedFile> OpenRegularFile(const std::string& path, Symlinks symlinks) {
  if (path.find('\0') != std::string::npos) {
    return InvalidArgument("path holds a NUL byte");
  }
  // The type is checked before opening (opening a device can have side effects, which
  // O_NONBLOCK does not prevent) and again on the descriptor (the same file, not a swap).
  struct stat before {};
  int looked = symlinks == Symlinks::kRefuse ? ::lstat(path.c_str(), &before)
                                             : ::stat(path.c_str(), &before);
  if (looked != 0) {
    int err = errno;
    return NotFound(path + (err == ENOENT ? ": no such file"
                                          : ": cannot stat: " + std::string(std::strerror(err))));
  }
  if (S_ISLNK(before.st_mode)) {
    return InvalidArgument(path + ": is a symlink; bundle files must be regular files");
  }
  if (!S_ISREG(before.st_mode)) {
    return InvalidArgument(path + ": not a regular file");
  }
  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  if (symlinks == Symlinks::kRefuse) {
    flags |= O_NOFOLLOW;
  }
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP && symlinks == Symlinks::kRefuse) {
      return InvalidArgument(path + ": became a symlink while being opened");
    }
    return NotFound(path + ": cannot open: " + std::strerror(err));
  }
  OpenedFile file{fd, {}};
  if (::fstat(fd, &file.st) != 0 || !S_ISREG(file.st.st_mode) || file.st.st_dev != before.st_dev ||
      file.st.st_ino != before.st_ino) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  return file;
}

Result<std::string> ReadRegularFile(const std::string& path, size_t max_bytes, Symlinks symlinks) {
  FERRY_ASSIGN_OR_RETURN(OpenedFile file, OpenRegularFile(path, symlinks));
  if (static_cast<uint64_t>(file.st.st_size) > max_bytes) {
    ::close(file.fd);
    return InvalidArgument(path + ": file is " + std::to_string(file.st.st_size) +
                           " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  std::string text(static_cast<size_t>(file.st.st_size), '\0');
  size_t have = 0;
  while (true) {
    if (have == text.size()) {
      if (have >= max_bytes) {
        char probe;
        ssize_t extra = ::read(file.fd, &probe, 1);
        if (extra > 0) {
          ::close(file.fd);
          return InvalidArgument(path + ": file grew past the limit of " +
                                 std::to_string(max_bytes) + " bytes while being read");
        }
        break;
      }
      text.resize(std::min(max_bytes, std::max<size_t>(4096, text.size() * 2)));
    }
    ssize_t n = ::read(file.fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      int err = errno;
      ::close(file.fd);
      return InvalidArgument(path + ": read failed: " + std::strerror(err));
    }
    if (n == 0) {
      break;
    }
    have += static_cast<size_t>(n);
  }
  ::close(file.fd);
  text.resize(have);
  return text;
}

}  // namespace ferry
