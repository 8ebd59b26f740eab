#include "supervisor/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace ferry::supervisor {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

Result<ChildProcess> Spawn(const ChildSpec& spec) {
  // Everything the child touches is built here: after fork only async-signal-safe calls.
  std::vector<std::string> argv_storage;
  argv_storage.push_back(spec.binary);
  argv_storage.insert(argv_storage.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::map<std::string, std::string> env_map;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) {
      env_map[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  for (const auto& [key, value] : spec.env) {
    env_map[key] = value;
  }
  // systemd's protocol variables are ferryd's alone: a child writing to NOTIFY_SOCKET could
  // claim readiness for the node.
  for (const char* own : {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS",
                          "LISTEN_PID", "LISTEN_FDNAMES"}) {
    env_map.erase(own);
  }
  std::vector<std::string> env_storage;
  for (const auto& [key, value] : env_map) {
    env_storage.push_back(key + "=" + value);
  }
  std::vector<char*> envp;
  for (std::string& e : env_storage) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  pid_t parent = getpid();
  if (spec.fds.size() > 16) {
    return InvalidArgument("at most 16 descriptors can be handed to a child");
  }
  const std::vector<int>& fds = spec.fds;
  sigset_t empty;
  sigemptyset(&empty);

  pid_t pid = fork();
  if (pid < 0) {
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // The child: die with ferryd; a parent that died before this line is caught by the check.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(126);
    }
    for (int s = 1; s < NSIG; ++s) {
      signal(s, SIG_DFL);  // Fails harmlessly for SIGKILL, SIGSTOP and the RT gaps.
    }
    sigprocmask(SIG_SETMASK, &empty, nullptr);
    if (spec.output_fd >= 0) {
      dup2(spec.output_fd, 1);
      dup2(spec.output_fd, 2);
    }
    // Out of the way first (a source may be 3 itself), then into place without CLOEXEC.
    int moved[16];
    size_t count = fds.size() < 16 ? fds.size() : 16;
    for (size_t i = 0; i < count; ++i) {
      moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 64);
    }
    for (size_t i = 0; i < count; ++i) {
      dup2(moved[i], static_cast<int>(3 + i));
    }
    syscall(SYS_close_range, static_cast<unsigned>(3 + count), ~0U, 0U);
    execve(argv[0], argv.data(), envp.data());
    const char* why = std::strerror(errno);
    (void)!write(2, "ferryd: exec ", 13);
    (void)!write(2, argv[0], std::strlen(argv[0]));
    (void)!write(2, ": ", 2);
    (void)!write(2, why, std::strlen(why));
    (void)!write(2, "\n", 1);
    _exit(127);
  }
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) {
    int err = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return Internal(std::string("pidfd_open: ") + std::strerror(err));
  }
  return ChildProcess{pid, pidfd};
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) {
    return "exit " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return std::string("killed by SIG") +
           (name != nullptr ? name : std::to_string(WTERMSIG(status)));
  }
  return "status " + std::to_string(status);
}

int Reap(ChildProcess* child, bool block) {
  int status = 0;
  if (child->pid > 0) {
    pid_t got;
    do {
      got = waitpid(child->pid, &status, block ? 0 : WNOHANG);
    } while (got < 0 && errno == EINTR);
  }
  if (child->pidfd >= 0) {
    close(child->pidfd);
  }
  child->pid = -1;
  child->pidfd = -1;
  return status;
}

bool Signal(const ChildProcess& child, int signal) {
  if (child.pidfd < 0) {
    return false;
  }
  return syscall(SYS_pidfd_send_signal, child.pidfd, signal, nullptr, 0) == 0;
}

}  // namespace ferry::supervisor
