// RepositoryControl: a change goes through the mailbox and its answer comes back to the
// caller; one change at a time; an answer after which the hook host restarts waits for the
// front end's drain; ferryd silent past the wait, and a control destroyed mid-wait, answer
// UNAVAILABLE.
#include "hookhost/frontend/repository_control.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

namespace ferry::frontend {
namespace {

std::unique_ptr<shm::RepositoryMailboxData> Box() {
  auto box = std::make_unique<shm::RepositoryMailboxData>();
  std::memset(static_cast<void*>(box.get()), 0, sizeof(*box));
  return box;
}

// Plays ferryd: takes one request and answers it with `status` and `flags`.
// `last`: the request word it took before (a predecessor's).
std::thread Ferryd(shm::RepositoryMailboxData& box, Status status, uint8_t flags,
                   std::shared_ptr<shm::RepositoryRequest> seen, uint64_t last = 0) {
  return std::thread([&box, status, flags, seen, last]() mutable {
    uint32_t sequence = 0;
    for (int i = 0; i < 5000; ++i) {
      auto taken = shm::TakeRepositoryRequest(box, &last, &sequence);
      if (taken) {
        if (taken->ok()) {
          *seen = **taken;
        }
        shm::PostRepositoryAnswer(box, sequence, status, flags);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
}

constexpr int64_t kLongWait = 30'000'000'000;

TEST_CASE("a load reaches the mailbox and ferryd's answer reaches the caller") {
  auto box = Box();
  auto seen = std::make_shared<shm::RepositoryRequest>();
  std::thread ferryd = Ferryd(*box, NotFound("no bundle 'x'"), 0, seen);
  RepositoryControl control(
      *box, [] { return false; }, kLongWait);
  std::promise<Status> answered;
  control.Submit(shm::RepositoryOp::kLoad, "x", 4, [&](const Status& s) { answered.set_value(s); });
  Status status = answered.get_future().get();
  ferryd.join();
  REQUIRE(!status.ok());
  CHECK(status.error().code == ErrorCode::kNotFound);
  CHECK(status.error().message == "no bundle 'x'");
  CHECK(seen->model == "x");
  CHECK(seen->op == shm::RepositoryOp::kLoad);
  CHECK(seen->max_batch_size == 4);
}

TEST_CASE("a second change while one waits is refused at once; the first is answered") {
  auto box = Box();
  RepositoryControl control(
      *box, [] { return false; }, kLongWait);
  std::promise<Status> first;
  control.Submit(shm::RepositoryOp::kUnload, "a", 0, [&](const Status& s) { first.set_value(s); });
  std::optional<Status> second;
  control.Submit(shm::RepositoryOp::kLoad, "b", 0, [&](const Status& s) { second = s; });
  REQUIRE(second.has_value());  // Answered on this thread, at once.
  CHECK(second->error().code == ErrorCode::kUnavailable);
  auto seen = std::make_shared<shm::RepositoryRequest>();
  std::thread ferryd = Ferryd(*box, OkStatus(), 0, seen);
  CHECK(first.get_future().get().ok());
  ferryd.join();
  CHECK(seen->model == "a");
  // Free again: the next change goes through.
  std::promise<Status> third;
  std::thread again = Ferryd(*box, OkStatus(), 0, seen, box->request.load());
  control.Submit(shm::RepositoryOp::kLoad, "c", 0, [&](const Status& s) { third.set_value(s); });
  CHECK(third.get_future().get().ok());
  again.join();
  CHECK(seen->model == "c");
}

TEST_CASE("an answer after which this hook host restarts waits for the drain") {
  auto box = Box();
  std::atomic<bool> drained{false};
  RepositoryControl control(
      *box, [&] { return drained.load(); }, kLongWait);
  auto seen = std::make_shared<shm::RepositoryRequest>();
  std::thread ferryd = Ferryd(*box, OkStatus(), shm::kRepositoryRefreshes, seen);
  std::atomic<bool> answered{false};
  bool drained_when_answered = false;
  control.Submit(shm::RepositoryOp::kLoad, "m", 0, [&](const Status&) {
    drained_when_answered = drained.load();
    answered.store(true);
  });
  ferryd.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(!answered.load());  // ferryd has answered; the client waits for the drain.
  drained.store(true);
  for (int i = 0; i < 2000 && !answered.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(answered.load());
  CHECK(drained_when_answered);
}

TEST_CASE("ferryd silent past the wait, or the control destroyed, answers UNAVAILABLE") {
  auto box = Box();
  std::promise<Status> timed_out;
  {
    RepositoryControl control(
        *box, [] { return false; }, 50'000'000);
    control.Submit(shm::RepositoryOp::kLoad, "m", 0,
                   [&](const Status& s) { timed_out.set_value(s); });
    Status status = timed_out.get_future().get();
    CHECK(status.error().code == ErrorCode::kUnavailable);
    CHECK(status.error().message.find("did not answer") != std::string::npos);
  }
  std::optional<Status> abandoned;
  {
    RepositoryControl control(
        *box, [] { return false; }, kLongWait);
    control.Submit(shm::RepositoryOp::kUnload, "m", 0, [&](const Status& s) { abandoned = s; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(abandoned.has_value());
  CHECK(abandoned->error().code == ErrorCode::kUnavailable);
}

TEST_CASE("a stale answer of a predecessor's request is not taken for this one's") {
  auto box = Box();
  // A predecessor asked as sequence 1 and ferryd answered it after the predecessor died.
  shm::PostRepositoryRequest(*box, 1, shm::RepositoryOp::kLoad, "old");
  shm::PostRepositoryAnswer(*box, 1, NotFound("old"), 0);
  auto seen = std::make_shared<shm::RepositoryRequest>();
  std::thread ferryd = Ferryd(*box, OkStatus(), 0, seen, box->request.load());
  RepositoryControl control(
      *box, [] { return false; }, kLongWait);
  std::promise<Status> answered;
  control.Submit(shm::RepositoryOp::kLoad, "new", 0,
                 [&](const Status& s) { answered.set_value(s); });
  CHECK(answered.get_future().get().ok());
  ferryd.join();
  CHECK(seen->model == "new");
  CHECK(seen->sequence == 2);  // It continued the predecessor's numbering.
}

}  // namespace
}  // namespace ferry::frontend
