#include "worker/answer_stats.h"

#include <doctest/doctest.h>

namespace ferry::worker {
namespace {

TEST_CASE("answers are counted with their times; a batch goes to the size it ran at") {
  AnswerStats stats({1, 4, 8});
  stats.RecordOk(3, 1000, 400, 1700);
  stats.RecordOk(1, 500, 400, 1600);  // An older clock reading does not move last back.
  stats.RecordFailed(70);
  stats.RecordFailed(-5);  // A stepped clock: 0.
  stats.RecordExecution(4, 400);
  stats.RecordExecution(3, 100);  // Ran at compiled size 4.
  stats.RecordExecution(8, 900);
  stats.RecordExecution(1, -1);
  const shm::AnswerStatsData& d = stats.data();
  CHECK(d.ok_requests == 2);
  CHECK(d.ok_rows == 4);
  CHECK(d.ok_ns == 1500);
  CHECK(d.compute_ns == 800);
  CHECK(d.last_answer_unix_ms == 1700);
  CHECK(d.failed_requests == 2);
  CHECK(d.failed_ns == 70);
  CHECK(d.batches[0].batch_size == 1);
  CHECK(d.batches[0].executions == 1);
  CHECK(d.batches[0].compute_ns == 0);
  CHECK(d.batches[1].batch_size == 4);
  CHECK(d.batches[1].executions == 2);
  CHECK(d.batches[1].compute_ns == 500);
  CHECK(d.batches[2].batch_size == 8);
  CHECK(d.batches[2].executions == 1);
  CHECK(d.batches[3].batch_size == 0);  // Unused.
}

TEST_CASE("an unbatched model reports size 1; sizes past the table share its last entry") {
  AnswerStats unbatched({0});
  unbatched.RecordExecution(0, 10);
  CHECK(unbatched.data().batches[0].batch_size == 1);
  CHECK(unbatched.data().batches[0].executions == 1);

  std::vector<int64_t> sizes;
  for (int64_t s = 1; s <= 40; ++s) {
    sizes.push_back(s);
  }
  AnswerStats many(sizes);
  many.RecordExecution(40, 5);
  many.RecordExecution(17, 5);
  many.RecordExecution(1000, 5);  // Larger than any size (cannot happen): the last entry.
  const shm::BatchStatsData& last = many.data().batches[shm::kMaxBatchStats - 1];
  CHECK(last.executions == 3);
  CHECK(last.compute_ns == 15);

  AnswerStats none({});  // A model that failed to load: nothing to count executions under.
  none.RecordExecution(4, 5);
  CHECK(none.data().batches[0].executions == 0);
}

}  // namespace
}  // namespace ferry::worker
