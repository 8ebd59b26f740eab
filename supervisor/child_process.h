// Starting and reaping ferryd's children: fork + exec with nothing inherited but what the
// child needs, a pidfd to watch it, and PR_SET_PDEATHSIG so it dies with ferryd.
//
// What a child gets: the argument list; ferryd's environment with `env` added or replaced;
// descriptors 0, 1 and 2 (the journal under systemd), and `fds` as 3, 4, ...; nothing else
// (close_range above those, and
// ferryd opens its own descriptors O_CLOEXEC besides); an empty signal mask and default
// dispositions; SIGKILL when ferryd's thread that started it dies (a SIGKILLed ferryd leaves
// no orphan holding the segment or a GPU).
//
// Thread safety: Spawn is async-signal-safe between fork and exec (everything the child
// touches is prepared before fork); call it from ferryd's one thread (PDEATHSIG follows the
// thread that forked).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace ferry::supervisor {

struct ChildSpec {
  std::string binary;                                    // Absolute or relative path.
  std::vector<std::string> args;                         // Without argv[0].
  std::vector<std::pair<std::string, std::string>> env;  // Added to ferryd's environment.
  std::vector<int> fds;  // Handed down as descriptors 3, 4, ... in this order.
  // When set: the child's stdout and stderr (a LogRelay's write end); else ferryd's own.
  int output_fd = -1;
};

// A started child. The pidfd is readable once the child has exited (it is still a zombie
// until Reap).
struct ChildProcess {
  pid_t pid = -1;
  int pidfd = -1;
};

// INTERNAL naming the call that failed (fork, pidfd_open). An exec that fails is reported by
// the child exiting with status 127 (its message on stderr).
Result<ChildProcess> Spawn(const ChildSpec& spec);

// "exit 0", "exit 3", "killed by SIGKILL" (from a wait status).
std::string DescribeWaitStatus(int status);

// Reaps an exited child and closes its pidfd; the wait status. REQUIRES: the child has
// exited (its pidfd was readable), or `block`.
int Reap(ChildProcess* child, bool block = false);

// Sends `signal` through the pidfd (never to a recycled pid). False when it is already gone.
bool Signal(const ChildProcess& child, int signal);

}  // namespace ferry::supervisor
