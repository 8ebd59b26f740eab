// The repository mailbox: a request and its answer round trip; what a hostile hook host can
// write (no NUL, a bad name, an unknown op, a word out of range, a repeated word) is refused
// or ignored, never read past the array.
#include "shm/repository_mailbox.h"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>

namespace ferry::shm {
namespace {

std::unique_ptr<RepositoryMailboxData> Box() {
  auto box = std::make_unique<RepositoryMailboxData>();
  std::memset(static_cast<void*>(box.get()), 0, sizeof(*box));
  return box;
}

TEST_CASE("a request is taken once and its answer reaches the asker") {
  auto box = Box();
  uint64_t seen = 0;
  uint32_t sequence = 0;
  CHECK(!TakeRepositoryRequest(*box, &seen, &sequence).has_value());  // Nothing posted.
  PostRepositoryRequest(*box, 7, RepositoryOp::kLoad, "resnet-50", 8);
  auto taken = TakeRepositoryRequest(*box, &seen, &sequence);
  REQUIRE(taken.has_value());
  REQUIRE(taken->ok());
  CHECK((*taken)->sequence == 7);
  CHECK((*taken)->op == RepositoryOp::kLoad);
  CHECK((*taken)->model == "resnet-50");
  CHECK((*taken)->max_batch_size == 8);
  CHECK(!TakeRepositoryRequest(*box, &seen, &sequence).has_value());  // Taken already.

  CHECK(!ReadRepositoryAnswer(*box, 7).has_value());
  PostRepositoryAnswer(*box, 7, OkStatus(), kRepositoryRefreshes);
  auto answer = ReadRepositoryAnswer(*box, 7);
  REQUIRE(answer.has_value());
  CHECK(answer->status.ok());
  CHECK(answer->refreshes);
  CHECK(!ReadRepositoryAnswer(*box, 8).has_value());  // Another request's answer is not it.

  PostRepositoryRequest(*box, 8, RepositoryOp::kUnload, "m");
  taken = TakeRepositoryRequest(*box, &seen, &sequence);
  REQUIRE(taken.has_value());
  CHECK((*taken)->op == RepositoryOp::kUnload);
  PostRepositoryAnswer(*box, 8, NotFound("no model 'm' is loaded"), 0);
  answer = ReadRepositoryAnswer(*box, 8);
  REQUIRE(answer.has_value());
  REQUIRE(!answer->status.ok());
  CHECK(answer->status.error().code == ErrorCode::kNotFound);
  CHECK(answer->status.error().message == "no model 'm' is loaded");
  CHECK(!answer->refreshes);
}

TEST_CASE("a hostile hook host's requests are refused, never read past the name") {
  auto box = Box();
  uint64_t seen = 0;
  uint32_t sequence = 0;
  SUBCASE("a name with no NUL") {
    std::memset(box->model, 'a', sizeof(box->model));
    box->request.store(uint64_t{3} << 8 | 1);
  }
  SUBCASE("a name that leaves the repository") {
    PostRepositoryRequest(*box, 3, RepositoryOp::kLoad, "../etc");
  }
  SUBCASE("an empty name") { PostRepositoryRequest(*box, 3, RepositoryOp::kLoad, ""); }
  SUBCASE("an unknown operation") { box->request.store(uint64_t{3} << 8 | 9); }
  SUBCASE("a word out of range") { box->request.store(~uint64_t{0}); }
  SUBCASE("a batch cap out of range") {
    PostRepositoryRequest(*box, 3, RepositoryOp::kLoad, "m", kMaxLoadBatchCap + 1);
  }
  SUBCASE("a negative batch cap") { PostRepositoryRequest(*box, 3, RepositoryOp::kLoad, "m", -1); }
  SUBCASE("a batch cap on an unload") {
    PostRepositoryRequest(*box, 3, RepositoryOp::kUnload, "m", 8);
  }
  auto taken = TakeRepositoryRequest(*box, &seen, &sequence);
  REQUIRE(taken.has_value());
  CHECK(!taken->ok());
  CHECK(taken->error().code == ErrorCode::kInvalidArgument);
  CHECK(!TakeRepositoryRequest(*box, &seen, &sequence).has_value());  // Taken once.
}

TEST_CASE("an answer with a code out of range reads as INTERNAL; a long message is cut") {
  auto box = Box();
  PostRepositoryAnswer(*box, 5, Internal(std::string(2000, 'x')), 0);
  auto answer = ReadRepositoryAnswer(*box, 5);
  REQUIRE(answer.has_value());
  CHECK(answer->status.error().message.size() == sizeof(box->message) - 1);
  box->answer.store(uint64_t{5} << 16 | 200);
  std::memset(box->message, 'y', sizeof(box->message));  // And no NUL.
  answer = ReadRepositoryAnswer(*box, 5);
  REQUIRE(answer.has_value());
  CHECK(answer->status.error().code == ErrorCode::kInternal);
  CHECK(answer->status.error().message.size() == sizeof(box->message) - 1);
}

}  // namespace
}  // namespace ferry::shm
