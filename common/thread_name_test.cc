// Thread names: set on the calling thread only, cut to the kernel's 15 bytes, seen in /proc.
#include "common/thread_name.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace ferry {
namespace {

// The kernel's record of thread `tid` of this process.
std::string CommOf(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST_CASE("a thread's name is its own, and the kernel shows it") {
  std::string before = ThisThreadName();
  std::string seen;
  std::string read_back;
  std::thread t([&] {
    NameThisThread("ferry-probe");
    read_back = ThisThreadName();
    seen = CommOf(gettid());
  });
  t.join();
  CHECK(read_back == "ferry-probe");
  CHECK(seen == "ferry-probe");
  CHECK(ThisThreadName() == before);  // The caller's own name is untouched.
}

TEST_CASE("a name longer than the kernel keeps is cut, not refused") {
  std::string read_back;
  std::thread t([&] {
    NameThisThread("ferry-a-name-far-too-long");
    read_back = ThisThreadName();
  });
  t.join();
  CHECK(read_back == "ferry-a-name-fa");
  CHECK(read_back.size() == kMaxThreadNameBytes);
}

}  // namespace
}  // namespace ferry
