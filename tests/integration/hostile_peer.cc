// ferry-hostile-peer NAME SLOT MODE MILLISECONDS: a process that attaches to a node's segment
// as SLOT, as a hook host or worker does, then behaves as a plugin with a wild pointer would.
// It finds its mappings the way the kernel reports them (/proc/self/maps), not through
// ferry's API, so it reaches everything it holds.
//   scribble  writes random bytes over every byte of every writable mapping of the segment,
//             again and again for MILLISECONDS; then checks that no read-only mapping can be
//             made writable (mprotect fails with EACCES) and that a write to each one faults
//             (a forked copy of itself dies of SIGSEGV); then writes to one itself and dies of
//             SIGSEGV. Exits 10-13 when a check fails (the test reports which).
//   exit      scribbles every writable mapping once and exits 0 (a process that corrupted its
//             state and died).
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shm/segment.h"

namespace {

struct Region {
  uint8_t* begin;
  uint8_t* end;
  bool writable;
  std::string path;
};

// Every mapping of an object of the segment `name` (/dev/shm/<name>, /dev/shm/<name>.sN).
std::vector<Region> SegmentMappings(const std::string& name) {
  std::vector<Region> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    std::string prefix = "/dev/shm/" + name;
    if (path != prefix && path.rfind(prefix + ".s", 0) != 0) {
      continue;
    }
    uintptr_t begin = 0, end = 0;
    std::sscanf(range.c_str(), "%lx-%lx", &begin, &end);
    out.push_back({reinterpret_cast<uint8_t*>(begin), reinterpret_cast<uint8_t*>(end),
                   perms.size() > 1 && perms[1] == 'w', path});
  }
  return out;
}

void Scribble(const std::vector<Region>& regions, std::mt19937_64& rng) {
  for (const Region& r : regions) {
    if (!r.writable) {
      continue;
    }
    for (uint8_t* p = r.begin; p + 8 <= r.end; p += 8) {
      uint64_t v = rng();
      std::memcpy(p, &v, 8);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: ferry-hostile-peer NAME SLOT scribble|exit MILLISECONDS\n");
    return 2;
  }
  std::string name = argv[1];
  auto slot = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
  std::string mode = argv[3];
  long ms = std::strtol(argv[4], nullptr, 10);
  ferry::Result<ferry::shm::Segment> segment = ferry::shm::Segment::Attach(name, slot);
  if (!segment.ok()) {
    std::fprintf(stderr, "hostile peer: %s\n", segment.error().message.c_str());
    return 2;
  }
  // From here on, nothing of ferry's: only what the process holds.
  std::vector<Region> regions = SegmentMappings(name);
  size_t writable = 0, writable_bytes = 0;
  for (const Region& r : regions) {
    writable += r.writable ? 1 : 0;
    writable_bytes += r.writable ? static_cast<size_t>(r.end - r.begin) : 0;
  }
  if (writable != 1 || regions.size() < 3) {
    std::fprintf(stderr, "hostile peer: %zu mappings, %zu writable (want 1 of at least 3)\n",
                 regions.size(), writable);
    return 13;
  }
  // A fault must kill this process (a sanitizer's handler would turn it into an abort).
  signal(SIGSEGV, SIG_DFL);
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()));
  if (mode == "exit") {
    Scribble(regions, rng);
    return 0;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  uint64_t passes = 0;
  while (std::chrono::steady_clock::now() < until) {
    Scribble(regions, rng);
    ++passes;
  }
  for (const Region& r : regions) {
    if (r.writable) {
      continue;
    }
    if (mprotect(r.begin, static_cast<size_t>(r.end - r.begin), PROT_READ | PROT_WRITE) == 0 ||
        errno != EACCES) {
      std::fprintf(stderr, "hostile peer: %s could be made writable\n", r.path.c_str());
      return 10;
    }
    pid_t child = fork();
    if (child == 0) {
      uint8_t* target = r.begin + rng() % static_cast<uint64_t>(r.end - r.begin);
      *reinterpret_cast<volatile uint8_t*>(target) = static_cast<uint8_t>(rng());
      _exit(0);  // The write went through.
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
      std::fprintf(stderr, "hostile peer: a write to %s did not fault\n", r.path.c_str());
      return 11;
    }
  }
  std::fprintf(stderr,
               "hostile peer: %llu passes over %zu writable bytes; every read-only "
               "mapping refused writes\n",
               static_cast<unsigned long long>(passes), writable_bytes);
  for (const Region& r : regions) {
    if (!r.writable) {
      *reinterpret_cast<volatile uint8_t*>(r.begin) = 1;  // Dies here.
    }
  }
  return 12;
}
