// Tests: holds a pool's thread (a hook thread, the gRPC call lane) so that work queued behind
// it waits, to check what is answered without that thread.
#pragma once

#include <future>
#include <memory>

namespace ferry::testing {

// Posts, through `post` (taking a std::function<void()>), a task that blocks its thread; returns
// once that task runs, with the promise that releases it when set (or destroyed, so a failed
// check does not leave the thread held).
template <typename Post>
std::promise<void> HoldThread(Post post) {
  std::promise<void> release;
  auto holding = std::make_shared<std::promise<void>>();
  post([holding, released = release.get_future().share()] {
    holding->set_value();
    released.wait();
  });
  holding->get_future().wait();
  return release;
}

}  // namespace ferry::testing
