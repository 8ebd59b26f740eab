#include "hookhost/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

// libseccomp's SCMP_A* macros leave a field to zero-initialisation.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

// getdents64's record (glibc declares none).
struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

namespace ferry::hookhost {
namespace {

// Landlock's attribute as of ABI 6; the kernel takes the prefix its ABI knows.
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
constexpr uint64_t kFsRightsAbi1 = (uint64_t{1} << 13) - 1;   // EXECUTE .. MAKE_SYM.
constexpr uint64_t kFsRefer = uint64_t{1} << 13;              // ABI 2.
constexpr uint64_t kFsTruncate = uint64_t{1} << 14;           // ABI 3.
constexpr uint64_t kFsIoctlDev = uint64_t{1} << 15;           // ABI 5.
constexpr uint64_t kNetBindTcp = 1, kNetConnectTcp = 2;       // ABI 4.
constexpr uint64_t kScopeAbstractUnix = 1, kScopeSignal = 2;  // ABI 6.

std::string Errno(std::string_view what) { return std::string(what) + ": " + std::strerror(errno); }

constexpr uint64_t kFsExecute = 1, kFsReadFile = 4, kFsReadDir = 8;

// Grants `ruleset` reading (and mapping as code) beneath each of `paths` that exists: a
// directory's whole hierarchy, or one regular file.
Status AllowReading(int ruleset, const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        continue;
      }
      return Internal(Errno("landlock: open " + path));
    }
    struct stat st {};
    bool dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    landlock_path_beneath_attr rule{};
    rule.allowed_access = kFsExecute | kFsReadFile | (dir ? kFsReadDir : 0);
    rule.parent_fd = fd;
    long added = syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    close(fd);
    if (added != 0) {
      return Internal(Errno("landlock_add_rule " + path));
    }
  }
  return OkStatus();
}

// Every filesystem right of the kernel's ABI handled, with reading granted beneath `readable`
// only; TCP bind and connect (ABI 4), abstract Unix sockets and signals (ABI 6) scoped.
Result<int> EnterLandlock(const std::vector<std::string>& readable) {
  long abi = syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi <= 0) {
    return 0;  // ENOSYS or EOPNOTSUPP: not built in or not enabled.
  }
  LandlockRulesetAttr attr{};
  size_t size = sizeof(uint64_t);
  attr.handled_access_fs = kFsRightsAbi1;
  if (abi >= 2) attr.handled_access_fs |= kFsRefer;
  if (abi >= 3) attr.handled_access_fs |= kFsTruncate;
  if (abi >= 5) attr.handled_access_fs |= kFsIoctlDev;
  if (abi >= 4) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnix | kScopeSignal;
    size = sizeof(attr);
  }
  long ruleset = syscall(__NR_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) {
    return Internal(Errno("landlock_create_ruleset"));
  }
  if (Status granted = AllowReading(static_cast<int>(ruleset), readable); !granted.ok()) {
    close(static_cast<int>(ruleset));
    return granted.error();
  }
  long restricted = syscall(__NR_landlock_restrict_self, ruleset, 0);
  close(static_cast<int>(ruleset));
  if (restricted != 0) {
    return Internal(Errno("landlock_restrict_self"));
  }
  return static_cast<int>(abi);
}

struct FilterDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

Status EnterSeccomp() {
  std::unique_ptr<void, FilterDeleter> filter(seccomp_init(SCMP_ACT_KILL_PROCESS));
  if (!filter) {
    return Internal("seccomp_init failed");
  }
  scmp_filter_ctx ctx = filter.get();
  // seccomp_init already kills every foreign architecture (x32 included on x86_64).
  int failed = 0;
  auto allow = [&](std::initializer_list<int> calls) {
    for (int nr : calls) {
      failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
  };
  auto refuse = [&](std::initializer_list<int> calls, int error = EPERM) {
    for (int nr : calls) {
      failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(error), nr, 0);
    }
  };
  allow({__NR_read, __NR_write, __NR_readv, __NR_writev, __NR_pread64, __NR_pwrite64, __NR_lseek,
         __NR_close, __NR_fcntl, __NR_dup, __NR_dup2, __NR_dup3, __NR_pipe, __NR_pipe2,
         // Serving inherited listening sockets.
         __NR_accept, __NR_accept4, __NR_recvfrom, __NR_recvmsg, __NR_sendto, __NR_sendmsg,
         __NR_shutdown, __NR_getsockopt, __NR_setsockopt, __NR_getsockname, __NR_getpeername,
         __NR_poll, __NR_ppoll, __NR_select, __NR_pselect6, __NR_epoll_create1, __NR_epoll_ctl,
         __NR_epoll_wait, __NR_epoll_pwait, __NR_eventfd2, __NR_timerfd_create,
         __NR_timerfd_settime, __NR_timerfd_gettime,
         // Memory (mmap and mprotect below, without PROT_EXEC).
         __NR_munmap, __NR_mremap, __NR_madvise, __NR_brk, __NR_mincore,
         // Threads and waiting.
         __NR_futex, __NR_futex_waitv, __NR_set_robust_list, __NR_get_robust_list, __NR_rseq,
         __NR_sched_yield, __NR_sched_getaffinity, __NR_nanosleep, __NR_clock_nanosleep,
         __NR_clock_gettime, __NR_clock_getres, __NR_gettimeofday, __NR_getrandom, __NR_getpid,
         __NR_getppid, __NR_gettid, __NR_getuid, __NR_geteuid, __NR_getgid, __NR_getegid,
         __NR_getrusage, __NR_restart_syscall, __NR_membarrier,
         // gRPC reads the kernel version (uname) when it starts serving a connection, and its
         // threads read their own scheduling parameters.
         __NR_uname, __NR_sched_getparam, __NR_sched_getscheduler,
         // Signals (to this process only: kill and tgkill below).
         __NR_rt_sigaction, __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_sigaltstack, __NR_exit,
         __NR_exit_group});
  // fstat only on descriptors (AT_EMPTY_PATH): stat by path would probe the filesystem.
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_fstat, 0);
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_newfstatat, 1,
                             SCMP_A3(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH));
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_newfstatat, 1,
                             SCMP_A3(SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH, 0));
  // Reading this process's limits (getrlimit), never setting any or another's.
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_prlimit64, 2, SCMP_A0(SCMP_CMP_EQ, 0),
                             SCMP_A2(SCMP_CMP_EQ, 0));
  // ioctl: non-blocking mode and readable bytes on a socket, close-on-exec, "is a tty".
  for (unsigned long request : {FIONBIO, FIONREAD, FIOCLEX, FIONCLEX, TCGETS}) {
    failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_ioctl, 1,
                               SCMP_A1(SCMP_CMP_EQ, static_cast<scmp_datum_t>(request)));
  }
  // Memory that cannot become code.
  for (int nr : {__NR_mmap, __NR_mprotect, __NR_pkey_mprotect}) {
    failed |=
        seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
    failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                               SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  }
  // Threads, never processes. clone3 passes its flags in memory, which a filter cannot read:
  // ENOSYS makes glibc fall back to clone.
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_clone, 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_clone, 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  refuse({__NR_clone3}, ENOSYS);
  // Signals: to this process only (abort() raises through tgkill).
  const auto self = static_cast<scmp_datum_t>(getpid());
  for (int nr : {__NR_kill, __NR_tgkill}) {
    failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_EQ, self));
    failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A0(SCMP_CMP_NE, self));
  }
  // prctl only for a thread's own name (common/thread_name.h): PR_SET_NAME and PR_GET_NAME,
  // options 15 and 16; any other option is refused.
  for (scmp_datum_t option : {PR_SET_NAME, PR_GET_NAME}) {
    failed |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_prctl, 1, SCMP_A0(SCMP_CMP_EQ, option));
  }
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_prctl, 1,
                             SCMP_A0(SCMP_CMP_LT, PR_SET_NAME));
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_prctl, 1,
                             SCMP_A0(SCMP_CMP_GT, PR_GET_NAME));
  // A connected pair of Unix sockets: the TLS relay hands each decrypted connection to its
  // server as one (net/tls_relay.h). It reaches nothing outside the process (no address, no
  // file); any other domain is refused.
  failed |=
      seccomp_rule_add(ctx, SCMP_ACT_ALLOW, __NR_socketpair, 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_socketpair, 1,
                             SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  // What a plugin trying to escape calls: refused, so it sees EPERM and the host survives.
  refuse({__NR_open,
          __NR_openat,
          __NR_openat2,
          __NR_creat,
          __NR_open_by_handle_at,
          __NR_name_to_handle_at,
          __NR_stat,
          __NR_lstat,
          __NR_access,
          __NR_faccessat,
          __NR_faccessat2,
          __NR_readlink,
          __NR_readlinkat,
          __NR_statx,
          __NR_socket,
          __NR_connect,
          __NR_bind,
          __NR_listen,
          __NR_execve,
          __NR_execveat,
          __NR_fork,
          __NR_vfork,
          __NR_ptrace,
          __NR_process_vm_readv,
          __NR_process_vm_writev,
          __NR_io_uring_setup,
          __NR_io_uring_enter,
          __NR_io_uring_register,
          __NR_bpf,
          __NR_memfd_create,
          __NR_userfaultfd,
          __NR_perf_event_open,
          __NR_mount,
          __NR_umount2,
          __NR_unshare,
          __NR_setns,
          __NR_pivot_root,
          __NR_chroot,
          __NR_keyctl,
          __NR_add_key,
          __NR_request_key,
          __NR_tkill,
          __NR_pidfd_open,
          __NR_pidfd_send_signal,
          __NR_pidfd_getfd,
          __NR_seccomp,
          __NR_setrlimit});
  if (failed != 0) {
    return Internal("seccomp: a rule could not be added");
  }
  int loaded = seccomp_load(ctx);
  if (loaded != 0) {
    return Internal(std::string("seccomp_load: ") + std::strerror(-loaded));
  }
  return OkStatus();
}

// The load stage's filter: everything a loader needs is allowed (opening for reading, mapping
// code, what glibc's dlopen does); what a plugin's constructor or create() would escape with
// is refused with EPERM. The serving filter (EnterSeccomp) is stacked on it later.
Status EnterLoadSeccomp() {
  std::unique_ptr<void, FilterDeleter> filter(seccomp_init(SCMP_ACT_ALLOW));
  if (!filter) {
    return Internal("seccomp_init failed");
  }
  scmp_filter_ctx ctx = filter.get();
  int failed = 0;
  auto refuse = [&](std::initializer_list<int> calls, int error = EPERM) {
    for (int nr : calls) {
      failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(error), nr, 0);
    }
  };
  // No sockets, processes, other processes' memory, kernel attack surface or namespaces.
  refuse({__NR_socket, __NR_connect, __NR_bind, __NR_listen, __NR_execve, __NR_execveat, __NR_fork,
          __NR_vfork, __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev,
          __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register, __NR_bpf,
          __NR_memfd_create, __NR_userfaultfd, __NR_perf_event_open, __NR_mount, __NR_umount2,
          __NR_unshare, __NR_setns, __NR_pivot_root, __NR_chroot, __NR_keyctl, __NR_add_key,
          __NR_request_key, __NR_tkill, __NR_pidfd_open, __NR_pidfd_send_signal, __NR_pidfd_getfd,
          __NR_openat2, __NR_creat,
          // Changing the filesystem (Landlock refuses these too, where the kernel has it).
          __NR_unlink, __NR_unlinkat, __NR_rename, __NR_renameat, __NR_renameat2, __NR_mkdir,
          __NR_mkdirat, __NR_rmdir, __NR_link, __NR_linkat, __NR_symlink, __NR_symlinkat,
          __NR_chmod, __NR_fchmod, __NR_fchmodat, __NR_chown, __NR_fchown, __NR_lchown,
          __NR_fchownat, __NR_truncate, __NR_mknod, __NR_mknodat});
  // Unix socket pairs only (as the serving filter: the TLS relay's).
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_socketpair, 1,
                             SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  // Threads, never processes (as the serving filter). A thread create() leaves running would
  // escape the serving filter, which applies to the threads that exist when it is loaded:
  // ThreadCensus finds it first.
  failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), __NR_clone, 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  refuse({__NR_clone3}, ENOSYS);
  // Opening for writing (a worker's shared memory, a file): refused by its flags.
  for (auto [nr, arg] : {std::pair{__NR_open, 1u}, std::pair{__NR_openat, 2u}}) {
    for (scmp_datum_t bit : {O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND}) {
      failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                                 scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, bit, bit});
    }
  }
  // Signals: to this process only.
  const auto self = static_cast<scmp_datum_t>(getpid());
  for (int nr : {__NR_kill, __NR_tgkill}) {
    failed |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A0(SCMP_CMP_NE, self));
  }
  if (failed != 0) {
    return Internal("seccomp (load stage): a rule could not be added");
  }
  int loaded = seccomp_load(ctx);
  if (loaded != 0) {
    return Internal(std::string("seccomp_load (load stage): ") + std::strerror(-loaded));
  }
  return OkStatus();
}

// rlimits (no core dumps), no_new_privs, not dumpable: the first layers of both stages.
Status EnterBaseLayers() {
  rlimit no_core{0, 0};
  if (setrlimit(RLIMIT_CORE, &no_core) != 0) {
    return Internal(Errno("setrlimit(RLIMIT_CORE)"));
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Internal(Errno("prctl(PR_SET_NO_NEW_PRIVS)"));
  }
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return Internal(Errno("prctl(PR_SET_DUMPABLE)"));
  }
  return OkStatus();
}

}  // namespace

std::string SandboxReport::Describe() const {
  return std::string("rlimits, no_new_privs, ") +
         (landlock_abi > 0 ? "landlock ABI " + std::to_string(landlock_abi)
                           : std::string("no landlock (kernel lacks it)")) +
         (seccomp ? ", seccomp allow-list" : "");
}

namespace {

// The private writable memory mapped now (VmData in /proc/self/status), in bytes.
Result<uint64_t> DataBytes() {
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Internal(Errno("open /proc/self/status"));
  }
  char text[8192];
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  text[n > 0 ? n : 0] = '\0';
  const char* line = std::strstr(text, "\nVmData:");
  unsigned long long kib = 0;
  if (line == nullptr || std::sscanf(line + 8, "%llu", &kib) != 1) {
    return Internal("/proc/self/status has no VmData");
  }
  return static_cast<uint64_t>(kib) * 1024;
}

// RLIMIT_DATA (soft and hard) at what is mapped now plus `headroom`.
Result<uint64_t> LimitData(uint64_t headroom) {
  FERRY_ASSIGN_OR_RETURN(uint64_t now, DataBytes());
  rlimit limit{now + headroom, now + headroom};
  if (setrlimit(RLIMIT_DATA, &limit) != 0) {
    return Internal(Errno("setrlimit(RLIMIT_DATA)"));
  }
  return now + headroom;
}

}  // namespace

Result<SandboxReport> EnterLoadSandbox(const std::vector<std::string>& readable,
                                       uint64_t max_memory) {
  SandboxReport report;
  if (max_memory > 0) {
    FERRY_ASSIGN_OR_RETURN(report.data_limit, LimitData(max_memory));
  }
  FERRY_RETURN_IF_ERROR(EnterBaseLayers());
  FERRY_ASSIGN_OR_RETURN(report.landlock_abi, EnterLandlock(readable));
  FERRY_RETURN_IF_ERROR(EnterLoadSeccomp());
  report.seccomp = true;
  return report;
}

Result<ThreadCensus> ThreadCensus::Open() {
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Internal(Errno("open /proc/self/task"));
  }
  return ThreadCensus(fd);
}

ThreadCensus::~ThreadCensus() {
  if (fd_ >= 0) {
    close(fd_);
  }
}

Result<int> ThreadCensus::Count() const {
  if (lseek(fd_, 0, SEEK_SET) != 0) {
    return Internal(Errno("lseek /proc/self/task"));
  }
  int threads = 0;
  alignas(8) char buffer[4096];
  for (;;) {
    long n = syscall(__NR_getdents64, fd_, buffer, sizeof(buffer));
    if (n < 0) {
      return Internal(Errno("getdents64 /proc/self/task"));
    }
    if (n == 0) {
      return threads;
    }
    for (long at = 0; at < n;) {
      auto* entry = reinterpret_cast<const struct linux_dirent64*>(buffer + at);
      threads += entry->d_name[0] != '.';
      at += entry->d_reclen;
    }
  }
}

std::vector<std::string> SystemLibraryPaths() {
  return {"/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib", "/lib64", "/etc/ld.so.cache"};
}

Result<SandboxReport> EnterSandbox(const SandboxOptions& options) {
  FERRY_RETURN_IF_ERROR(EnterBaseLayers());
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) {
    return Internal(Errno("getrlimit(RLIMIT_NOFILE)"));
  }
  rlim_t limit = std::min<rlim_t>(options.max_open_files, files.rlim_max);
  files = {limit, limit};
  if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
    return Internal(Errno("setrlimit(RLIMIT_NOFILE)"));
  }
  SandboxReport report;
  Result<int> landlock = EnterLandlock({});
  if (!landlock.ok()) {
    return landlock.error();
  }
  report.landlock_abi = *landlock;
  if (Status s = EnterSeccomp(); !s.ok()) {
    return s.error();
  }
  report.seccomp = true;
  return report;
}

}  // namespace ferry::hookhost
