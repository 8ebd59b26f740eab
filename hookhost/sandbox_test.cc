// The hook host's sandbox, proven with real processes: a child loads the escape plugin, enters
// the sandbox and lets the plugin try one escape; the parent checks it was refused (EPERM) or
// that only the child died. A control run without the sandbox shows the same probe escapes,
// so the test can tell the difference. A second child checks what a hook host needs still
// works inside: threads, locks, memory, pipes, accepting on an inherited listening socket.
#include "hookhost/sandbox.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_name.h"
#include "hookhost/plugin.h"

namespace ferry::hookhost {
namespace {

struct Outcome {
  std::string message;  // What the child wrote before exiting ("" if it died first).
  int exit_code = -1;   // -1 when killed.
  int signal = 0;
};

// Runs `body` in a forked child whose stdout-like pipe is handed to it; the child _exits
// (no atexit handlers or leak checks run inside the sandbox).
// `parent` runs in the parent while the child lives.
template <typename Body, typename Parent>
Outcome InChild(Body body, Parent parent) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::string message = body();
    (void)!write(fds[1], message.data(), message.size());
    _exit(0);
  }
  close(fds[1]);
  parent();
  Outcome outcome;
  char buffer[512];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) {
    outcome.message.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFEXITED(status)) {
    outcome.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    outcome.signal = WTERMSIG(status);
  }
  return outcome;
}

template <typename Body>
Outcome InChild(Body body) {
  return InChild(body, [] {});
}

// In the child: load the escape plugin for `action`, optionally sandbox, run its preprocess.
std::string TryEscape(const std::string& action, bool sandbox) {
  Result<std::shared_ptr<Plugin>> plugin =
      Plugin::Open(std::string(FERRY_TEST_PLUGIN_DIR) + "/escape.so");
  if (!plugin.ok()) {
    return "setup: " + plugin.error().message;
  }
  Result<std::unique_ptr<PluginInstance>> instance = PluginInstance::Create(*plugin, action);
  if (!instance.ok()) {
    return "setup: " + instance.error().message;
  }
  if (sandbox) {
    Result<SandboxReport> report = EnterSandbox({});
    if (!report.ok()) {
      return "setup: " + report.error().message;
    }
  }
  std::vector<uint8_t> bytes(4096, 0);
  TensorView input{"x", DType::kU8, {1, 4096}, bytes};
  std::vector<std::string> names{"y"};
  std::vector<AllocatedTensor> out;
  Status s = (*instance)->Preprocess(
      std::span(&input, 1), names,
      [](uint32_t, DType, const Shape&) { return std::optional<AllocatedTensor>(); }, &out);
  return s.ok() ? "returned OK" : s.error().message;
}

// In the child: the load sandbox (reading beneath the system libraries and the plugin's
// directory), then the escape plugin opened and its create() trying `action`.
std::string TryEscapeAtLoad(const std::string& action, bool sandbox) {
  if (sandbox) {
    std::vector<std::string> readable = SystemLibraryPaths();
    readable.push_back(FERRY_TEST_PLUGIN_DIR);
    Result<SandboxReport> report = EnterLoadSandbox(readable);
    if (!report.ok()) {
      return "setup: " + report.error().message;
    }
    if (report->landlock_abi == 0 && action == "open") {
      return "no landlock: reading is confined only where the kernel has it";
    }
  }
  Result<std::shared_ptr<Plugin>> plugin =
      Plugin::Open(std::string(FERRY_TEST_PLUGIN_DIR) + "/escape.so");
  if (!plugin.ok()) {
    return "setup: " + plugin.error().message;
  }
  Result<std::unique_ptr<PluginInstance>> instance =
      PluginInstance::Create(*plugin, "create:" + action);
  return instance.ok() ? "created" : instance.error().message;
}

TEST_CASE("without the load sandbox a plugin's create() escapes (the test can tell)") {
  for (std::string action : {"open", "write_file", "fork"}) {
    CAPTURE(action);
    Outcome o = InChild([&] { return TryEscapeAtLoad(action, false); });
    CHECK(o.message.find("ESCAPED") != std::string::npos);
  }
}

TEST_CASE("under the load sandbox each escape a plugin's create() tries is refused") {
  for (std::string action : {"open", "write_file", "shm_write", "connect", "execve", "fork",
                             "ptrace", "io_uring", "kill_parent"}) {
    CAPTURE(action);
    Outcome o = InChild([&] { return TryEscapeAtLoad(action, true); });
    CAPTURE(o.message);
    CHECK(o.exit_code == 0);
    CHECK(o.message.find("setup:") == std::string::npos);
    CHECK(o.message.find("ESCAPED") == std::string::npos);
    CHECK((o.message.find("refused: ") != std::string::npos ||
           o.message.rfind("no landlock", 0) == 0));
  }
}

TEST_CASE(
    "under the load sandbox a plugin loads, its bundle reads, and the serving sandbox stacks") {
  std::string dir = FERRY_TEST_PLUGIN_DIR;
  Outcome o = InChild([&] {
    std::vector<std::string> readable = SystemLibraryPaths();
    readable.push_back(dir);
    Result<SandboxReport> report = EnterLoadSandbox(readable);
    if (!report.ok()) {
      return "setup: " + report.error().message;
    }
    int own = open((dir + "/escape.so").c_str(), O_RDONLY | O_CLOEXEC);
    if (own < 0) {
      return std::string("cannot read beneath a readable directory: ") + std::strerror(errno);
    }
    close(own);
    int other = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
    if (other >= 0 && report->landlock_abi > 0) {
      return std::string("read /etc/hostname outside the readable directories");
    }
    Result<std::shared_ptr<Plugin>> plugin = Plugin::Open(dir + "/escape.so");
    if (!plugin.ok()) {
      return "cannot load under the load sandbox: " + plugin.error().message;
    }
    Result<std::unique_ptr<PluginInstance>> instance = PluginInstance::Create(*plugin, "open");
    if (!instance.ok()) {
      return "create failed: " + instance.error().message;
    }
    Result<SandboxReport> serving = EnterSandbox({});
    if (!serving.ok()) {
      return "the serving sandbox does not stack: " + serving.error().message;
    }
    std::thread([] {}).join();  // Threads again once serving.
    return std::string("ok");
  });
  CHECK(o.exit_code == 0);
  CHECK(o.message == "ok");
}

TEST_CASE("a thread create() leaves running is counted before the serving sandbox") {
  Outcome o = InChild([] {
    Result<ThreadCensus> census = ThreadCensus::Open();
    if (!census.ok()) {
      return "setup: " + census.error().message;
    }
    Result<int> before = census->Count();
    std::string passing = TryEscapeAtLoad("thread", true);  // Started and joined: allowed.
    Result<int> between = census->Count();
    std::string lingering = TryEscapeAtLoad("linger", true);
    Result<int> after = census->Count();
    if (!before.ok() || !between.ok() || !after.ok()) {
      return std::string("count failed");
    }
    return passing + " " + lingering + " " + std::to_string(*before) + " " +
           std::to_string(*between) + " " + std::to_string(*after);
  });
  CHECK(o.exit_code == 0);
  CHECK(o.message.find("ESCAPED: start a thread") != std::string::npos);  // It may start one,
  CHECK(o.message.find(" 1 1 2") != std::string::npos);                   // but not leave it.
}

// GCC says __SANITIZE_ADDRESS__; clang says __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
constexpr bool kUnderAddressSanitizer = __has_feature(address_sanitizer);
#else
constexpr bool kUnderAddressSanitizer = false;
#endif

TEST_CASE("the load stage bounds the memory the host may add ([hooks] max_memory)") {
  if (kUnderAddressSanitizer) {
    MESSAGE(
        "skipped under AddressSanitizer: its allocator maps memory the data limit does not "
        "bound, and aborts where malloc would return NULL");
    return;
  }
  Outcome o = InChild([] {
    Result<SandboxReport> report = EnterLoadSandbox(SystemLibraryPaths(), 64 << 20);
    if (!report.ok() || report->data_limit == 0) {
      return std::string("setup failed");
    }
    void* within = std::malloc(16 << 20);
    void* beyond = std::malloc(256 << 20);  // What a plugin's 2 GiB allocation meets.
    std::string out = std::string(within != nullptr ? "within: ok" : "within: refused") +
                      (beyond != nullptr ? ", beyond: ESCAPED" : ", beyond: refused");
    std::free(within);
    std::free(beyond);
    return out;
  });
  CHECK(o.exit_code == 0);
  CHECK(o.message == "within: ok, beyond: refused");
}

TEST_CASE("without the sandbox the probe escapes (the test can tell)") {
  Outcome o = InChild([] { return TryEscape("open", false); });
  CHECK(o.exit_code == 0);
  CHECK(o.message.find("ESCAPED: open /etc/passwd") != std::string::npos);
}

TEST_CASE("each escape a plugin tries is refused with EPERM, and the host lives") {
  for (std::string action :
       {"open", "connect", "execve", "fork", "ptrace", "io_uring", "exec_memory", "kill_parent"}) {
    CAPTURE(action);
    Outcome o = InChild([&] { return TryEscape(action, true); });
    CHECK(o.exit_code == 0);
    CHECK(o.message.find("refused: ") != std::string::npos);
    CHECK(o.message.find("Operation not permitted") != std::string::npos);
    CHECK(o.message.find("ESCAPED") == std::string::npos);
  }
}

TEST_CASE("what cannot be refused kills only the hook host") {
  Outcome wild = InChild([] { return TryEscape("wild_write", true); });
  CHECK(wild.exit_code == -1);
  // SIGSEGV, or SIGABRT when a sanitizer's handler turns the fault into an abort.
  CHECK((wild.signal == SIGSEGV || wild.signal == SIGBUS || wild.signal == SIGABRT));
  Outcome crash = InChild([] { return TryEscape("crash", true); });
  CHECK(crash.signal == SIGABRT);  // abort() signals itself: allowed, and fatal.
}

TEST_CASE("inside the sandbox a Unix socket pair can be made (the TLS relay's), no other") {
  Outcome o = InChild([] {
    if (!EnterSandbox({}).ok()) {
      return std::string("setup failed");
    }
    int pair[2];
    bool unix_pair = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0;
    bool moved = unix_pair && write(pair[0], "x", 1) == 1;
    char got = 0;
    moved = moved && read(pair[1], &got, 1) == 1 && got == 'x';
    // Without the filter AF_INET pairs fail with EOPNOTSUPP; the filter answers first.
    int other = socketpair(AF_INET, SOCK_STREAM, 0, pair);
    std::string inet = other == 0 ? "made" : std::strerror(errno);
    return std::string(moved ? "unix: ok" : "unix: failed") + ", inet: " + inet;
  });
  CHECK(o.exit_code == 0);
  CHECK(o.message == "unix: ok, inet: Operation not permitted");
}

TEST_CASE("inside the sandbox a thread can name itself, and no other prctl is allowed") {
  Outcome o = InChild([] {
    if (!EnterSandbox({}).ok()) {
      return std::string("setup failed");
    }
    std::string named;
    std::thread t([&] {
      NameThisThread("ferry-sandboxed");
      named = ThisThreadName();
    });
    t.join();
    // Dumpable again would let a process of the same user attach: refused, and the host lives.
    int dumpable = prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    std::string refused = dumpable == 0 ? "allowed" : std::strerror(errno);
    int negative = prctl(-1, 0, 0, 0, 0);  // Below every option the filter allows.
    std::string below = negative == 0 ? "allowed" : std::strerror(errno);
    return named + ", dumpable: " + refused + ", -1: " + below;
  });
  CHECK(o.exit_code == 0);
  CHECK(o.message ==
        "ferry-sandboxed, dumpable: Operation not permitted, -1: Operation not permitted");
}

TEST_CASE("a call outside the allow-list kills the process") {
  Outcome o = InChild([] {
    if (!EnterSandbox({}).ok()) {
      return std::string("setup failed");
    }
    (void)!chdir("/");  // Not on the list: SIGSYS.
    return std::string("survived chdir");
  });
  CHECK(o.signal == SIGSYS);
  CHECK(o.message.empty());
}

TEST_CASE("inside the sandbox a hook host still has threads, locks, memory and its sockets") {
  // A listening socket made before the sandbox, as ferryd hands them down.
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(listener, 4) == 0);
  socklen_t length = sizeof(addr);
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) == 0);

  Outcome o = InChild(
      [listener] {
        Result<SandboxReport> report = EnterSandbox({});
        if (!report.ok()) {
          return "setup: " + report.error().message;
        }
        std::mutex mutex;
        std::condition_variable cv;
        int done = 0;
        std::vector<std::thread> threads;
        for (int i = 0; i < 4; ++i) {
          threads.emplace_back([&] {
            std::vector<char> memory(16 << 20, 1);  // mmap'd by malloc.
            std::lock_guard lock(mutex);
            done += memory[12345];
            cv.notify_all();
          });
        }
        {
          std::unique_lock lock(mutex);
          cv.wait(lock, [&] { return done == 4; });
        }
        for (std::thread& t : threads) {
          t.join();
        }
        int connection = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (connection < 0) {
          return std::string("accept failed: ") + std::strerror(errno);
        }
        char byte = 0;
        if (read(connection, &byte, 1) != 1 || write(connection, "k", 1) != 1) {
          return std::string("socket i/o failed");
        }
        close(connection);
        return "ok " + report->Describe();
      },
      [&addr] {  // The parent connects while the child waits in accept.
        int client = socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
        char byte = 'p';
        CHECK(write(client, &byte, 1) == 1);
        CHECK(read(client, &byte, 1) == 1);
        CHECK(byte == 'k');
        close(client);
      });
  close(listener);
  CHECK(o.exit_code == 0);
  CHECK(o.message.rfind("ok rlimits, no_new_privs", 0) == 0);
  MESSAGE(o.message);
}

}  // namespace
}  // namespace ferry::hookhost
