// A std::mutex annotated for clang's -Wthread-safety analysis, so GUARDED_BY / REQUIRES /
// EXCLUDES on members and methods are checked at compile time (LevelDB port/thread_annotations).
//
// Thread safety: safe for concurrent use (it is the lock).
#pragma once

#include <mutex>

#if defined(__clang__)
#define FERRY_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FERRY_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) FERRY_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY FERRY_THREAD_ANNOTATION(scoped_lockable)
// absl's internal thread_annotations.h (which gRPC's headers pull in) defines GUARDED_BY to
// the same attribute: ours stands, whichever header comes first.
#undef GUARDED_BY
#define GUARDED_BY(x) FERRY_THREAD_ANNOTATION(guarded_by(x))
#define REQUIRES(...) FERRY_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) FERRY_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) FERRY_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) FERRY_THREAD_ANNOTATION(release_capability(__VA_ARGS__))

namespace ferry {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // BasicLockable, for std::condition_variable_any::wait(mu) while a MutexLock holds it.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) {
      mu_->Unlock();
    }
  }
  // Drops and retakes the lock inside the scope (work done outside it).
  void Unlock() RELEASE() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
  bool held_ = true;
};

}  // namespace ferry
