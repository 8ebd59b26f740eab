// A one-shot "the caller left" signal between a front end and the request flow: the front end
// (HTTP on a closed connection, gRPC on a cancelled call) fires it; the flow subscribes the one
// action that takes its request back (hookhost.h).
//
// Thread safety: Fire, Subscribe and fired() are safe from any thread. The action runs exactly
// once: on the firing thread, or on the subscribing thread when it was fired before; never
// under the signal's lock, so it may take its own locks.
// Lifetime: shared (std::shared_ptr) by whoever may fire or subscribe; the action's captures
// live as long as the signal or until it ran.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <utility>

#include "common/mutex.h"

namespace ferry {

class CancelSignal {
 public:
  // Fires the signal; the subscribed action, if any, runs now. Later calls do nothing.
  void Fire() {
    std::function<void()> action;
    {
      MutexLock lock(&mu_);
      if (fired_) {
        return;
      }
      fired_ = true;
      action = std::move(action_);
      action_ = nullptr;
    }
    if (action) {
      action();
    }
  }

  // REQUIRES: at most one subscription per signal (checked: a second aborts, as it would
  // silently drop the first's cancellation). Runs `action` now when already fired.
  void Subscribe(std::function<void()> action) {
    {
      MutexLock lock(&mu_);
      if (subscribed_) {
        std::fprintf(stderr, "ferry: CancelSignal subscribed twice\n");
        std::abort();
      }
      subscribed_ = true;
      if (!fired_) {
        action_ = std::move(action);
        return;
      }
    }
    action();
  }

  bool fired() const {
    MutexLock lock(&mu_);
    return fired_;
  }

 private:
  mutable Mutex mu_;
  bool fired_ GUARDED_BY(mu_) = false;
  bool subscribed_ GUARDED_BY(mu_) = false;
  std::function<void()> action_ GUARDED_BY(mu_);
};

}  // namespace ferry
