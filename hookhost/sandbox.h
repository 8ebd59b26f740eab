// The hook host's sandbox, in two stages.
//
// The load stage (EnterLoadSandbox) is entered after the repository's manifests are read and
// before any plugin is opened: dlopen runs a plugin's constructors and create() runs its code,
// so both run confined. Files can be read (and mapped as code) only beneath the plugins'
// bundle directories and the system library directories (Landlock, where the kernel has it);
// nothing can be written, created or removed; no socket or process can be started, no other
// process traced or signalled (a seccomp filter that allows the rest). A thread may be
// started but not left running (ThreadCensus).
//
// The serving stage (EnterSandbox) is entered once, after the segment is mapped, the plugins
// created and the listening sockets inherited, before the first request (Chromium's "load,
// then seal"). It stacks on the load stage.
//
// Layers, in order (docs/hookhost.md gives the why of each):
//  1. rlimits: no core dumps, a bounded number of descriptors;
//  2. PR_SET_NO_NEW_PRIVS (required by the next two) and PR_SET_DUMPABLE 0 (no ptrace attach,
//     no /proc/PID/mem by processes of the same user);
//  3. Landlock, where the kernel has it: every filesystem right of its ABI handled with no
//     rule (nothing can be opened, created or removed by path), TCP bind and connect (ABI 4),
//     abstract Unix sockets and signals to other processes (ABI 6);
//  4. a seccomp allow-list (libseccomp), arch-checked. What a hook host needs is allowed:
//     reading and writing its descriptors, accepting on inherited listening sockets, futexes,
//     uname and its own scheduling parameters (gRPC reads them),
//     memory without PROT_EXEC, threads (clone with CLONE_THREAD), clocks, signals to itself,
//     a thread's own name (prctl PR_SET_NAME and PR_GET_NAME; any other prctl is refused).
//     The escapes a plugin would try fail with EPERM: open*, socket, connect, bind, listen,
//     execve*, fork (clone without CLONE_THREAD), ptrace, process_vm_*, io_uring_*, bpf,
//     memfd_create, userfaultfd, perf_event_open, mount, unshare, setns, keyctl, kill of
//     another process, mmap/mprotect with PROT_EXEC. Anything else kills the process.
//
// Thread safety: call from the main thread before any other thread exists (seccomp and
// Landlock then apply to every thread started later; threads started before would escape).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ferry::hookhost {

struct SandboxOptions {
  uint64_t max_open_files = 4096;  // RLIMIT_NOFILE: connections the front end may accept.
};

// What was engaged, for the start-up log and the tests.
struct SandboxReport {
  int landlock_abi = 0;     // 0 when the kernel has no Landlock (or it is disabled).
  uint64_t data_limit = 0;  // RLIMIT_DATA set by the load stage; 0 when none.
  bool seccomp = false;
  std::string Describe() const;
};

// The load stage: RLIMIT_DATA at what is mapped now plus `max_memory` (none when 0: the
// plugins' allocations, and the host's own from then on, fail past it), rlimits,
// no_new_privs, not dumpable, Landlock granting reading beneath `readable` (directories or
// regular files; missing ones are skipped), the load filter.
// INTERNAL naming the layer that cannot engage; Landlock's absence is reported (then files
// anywhere can be opened for reading, but never for writing). Same thread rule as below.
Result<SandboxReport> EnterLoadSandbox(const std::vector<std::string>& readable,
                                       uint64_t max_memory = 0);
// The threads of this process, counted through /proc/self/task opened before the load
// sandbox (which refuses opening /proc). hookhost_main checks, before the serving sandbox,
// that create() left no thread running: such a thread would not get the serving filter.
class ThreadCensus {
 public:
  static Result<ThreadCensus> Open();
  ThreadCensus(ThreadCensus&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ThreadCensus& operator=(ThreadCensus&&) = delete;
  ~ThreadCensus();
  // Threads alive now, this one included.
  Result<int> Count() const;

 private:
  explicit ThreadCensus(int fd) : fd_(fd) {}
  int fd_;
};

// Where the dynamic loader finds a plugin's libraries: /usr/lib, /lib, ..., /etc/ld.so.cache.
std::vector<std::string> SystemLibraryPaths();

// The serving stage: enters every layer. INTERNAL naming the layer when one that must engage cannot
// (rlimits, no_new_privs, seccomp); Landlock's absence is reported, not an error.
Result<SandboxReport> EnterSandbox(const SandboxOptions& options);

}  // namespace ferry::hookhost
