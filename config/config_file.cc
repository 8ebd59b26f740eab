#include "config/config_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ferry {

Result<std::string> ReadConfigFile(const std::string& path, std::string_view what, size_t max_bytes,
                                   bool secret) {
  std::string name = std::string(what) + " " + path;
  // O_NONBLOCK: a FIFO must not block the open; O_NOFOLLOW: the checked file is the one read.
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return InvalidArgument(name + ": " + std::strerror(errno));
  }
  struct Close {
    int fd;
    ~Close() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidArgument(name + ": not a regular file");
  }
  if (secret && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgument(name + " has mode " + mode +
                           ": group or others may read or write it; chmod 600 it");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return InvalidArgument(name + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return InvalidArgument(name + ": " + std::strerror(errno));
    }
    if (n == 0) {
      break;
    }
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) {  // It grew after fstat.
    return InvalidArgument(name + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  text.resize(got);
  return text;
}

}  // namespace ferry
