// Names the calling thread: what `top -H`, `ps -L`, perf and /proc/PID/task/TID/comm show, so
// an operator (or a profile) can tell a hook host's transport thread from its gRPC queue
// thread, or a worker's execution thread from its dispatch loop. Linux keeps 15 bytes of a
// name: a longer one is cut there.
//
// Best effort: a failure (a filter refusing prctl) leaves the name unchanged, and nothing
// depends on it. Inside a hook host's sandbox (hookhost/sandbox.h) naming stays allowed.
//
// Thread safety: names only the calling thread; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

// At most this many bytes of a thread's name are kept.
inline constexpr size_t kMaxThreadNameBytes = 15;

void NameThisThread(std::string_view name);

// The calling thread's name ("" when it cannot be read).
std::string ThisThreadName();

}  // namespace ferry
