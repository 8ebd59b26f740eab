// Admission by predicted wait (docs/scheduler.md): a request whose flow's queued work at its
// level or a more urgent one, served at the flow's fair share, would keep it waiting past its
// level's max wait is refused at once, with a retry hint computed from that queue.
#include <doctest/doctest.h>

#include <string>

#include "worker/scheduler/scheduler_testing.h"

namespace ferry {
namespace {

using testing::kMs;

// 32 rows cost 0.0008 + 0.00005 * 32 = 2.4 ms: 0.075 ms a row at the largest size.
constexpr double kBatch = 0.0024;

Scheduler Make(std::array<double, 4> max_wait, int models = 1) {
  SchedulerConfig config;
  config.max_wait_seconds = max_wait;
  config.priority_names[3] = "background";
  config.max_queue_depth = 100000;
  std::vector<ModelSpec> specs;
  for (int m = 0; m < models; ++m) {
    specs.push_back(testing::Spec("m" + std::to_string(m)));
  }
  Scheduler s = testing::Make(specs, config);
  for (int m = 0; m < models; ++m) {
    for (int64_t size : {1, 8, 32}) {
      s.SeedCost(m, 0, size, 0.0008 + 0.00005 * static_cast<double>(size));
    }
  }
  return s;
}

QueuedRequest Req(Priority level, uint32_t tenant = 0, int64_t rows = 1) {
  QueuedRequest r = testing::Req(0, rows);
  r.priority = level;
  r.tenant = tenant;
  return r;
}

// Requests of one row admitted before the first refusal; that refusal's message.
std::pair<int, std::string> Fill(Scheduler& s, Priority level, uint32_t tenant = 0) {
  for (int n = 0; n < 100000; ++n) {
    Status st = s.Enqueue(0, Req(level, tenant));
    if (!st.ok()) {
      CHECK(st.error().code == ErrorCode::kResourceExhausted);
      return {n, st.error().message};
    }
  }
  return {-1, ""};
}

TEST_CASE("a level's max wait refuses the request that would wait past it, naming when to retry") {
  Scheduler s = Make({0, 0, 0, 0.020});
  // Admitted while rows ahead x 0.075 ms + one 2.4 ms dispatch <= 20 ms: 234 ahead, so 235.
  auto [admitted, message] = Fill(s, 3);
  CHECK(admitted == 235);
  CHECK(message.find("priority 3 ('background') request would wait about 21 ms") !=
        std::string::npos);
  CHECK(RetryAfterMs(message) == 1);
  CHECK(s.Metrics(0)[0].over_wait == 1);
  // More refusals say the same; a request of a more urgent level is not behind them.
  CHECK_FALSE(s.Enqueue(0, Req(3)).ok());
  CHECK(s.Enqueue(0, Req(2)).ok());  // Level 2 has no max wait.
  // After a dispatch of 32 rows, 32 more fit.
  Decision d = s.Next(0);
  REQUIRE(d.dispatch.runs());
  s.Complete(d.dispatch, kBatch, 0);
  CHECK(Fill(s, 3).first == 31);  // 32 left; the level-2 request is ahead of them too.
}

TEST_CASE("without a max wait, or before the cost is measured, nothing is refused for waiting") {
  Scheduler s = Make({});
  CHECK(Fill(s, 3).first == -1);
  SchedulerConfig config;
  config.max_wait_seconds[3] = 0.001;
  Scheduler unmeasured = testing::Make({testing::Spec("m0")}, config);
  for (int n = 0; n < 1000; ++n) {
    REQUIRE(unmeasured.Enqueue(0, Req(3)).ok());
  }
}

TEST_CASE("the retry hint is the time the queue ahead needs to drain to the max wait") {
  Scheduler s = Make({0, 0, 0, 0.020});
  for (int n = 0; n < 1000; ++n) {
    REQUIRE(s.Enqueue(0, Req(1)).ok());  // Level 1 has no max wait; it is ahead of level 3.
  }
  // 1,000 rows x 0.075 ms + 2.4 ms = 77.4 ms: 57.4 ms past the 20 ms allowed.
  Status st = s.Enqueue(0, Req(3));
  REQUIRE_FALSE(st.ok());
  CHECK(RetryAfterMs(st.error().message) == 58);
  for (int batches = 0; batches < 16; ++batches) {  // 512 rows run.
    Decision d = s.Next(0);
    REQUIRE(d.dispatch.runs());
    s.Complete(d.dispatch, kBatch, 0);
  }
  // 488 rows: 36.6 + 2.4 - 20 = 19 ms.
  st = s.Enqueue(0, Req(3));
  REQUIRE_FALSE(st.ok());
  CHECK(RetryAfterMs(st.error().message) == 19);
}

TEST_CASE("a flow's share sets its wait: a tenant beside another backlogged one gets half") {
  Scheduler s = Make({0, 0, 0, 0.020});
  REQUIRE(s.Enqueue(0, Req(3, 2)).ok());  // Tenant 2 backlogged: tenant 1's share is 1/2.
  auto [admitted, message] = Fill(s, 3, 1);
  // rows ahead x 0.075 ms / 0.5 + 2.4 ms <= 20 ms: 117 ahead, so 118.
  CHECK(admitted == 118);
  CHECK(RetryAfterMs(message) == 1);
  // Tenant 2's own flow has one row queued: it is admitted, whatever tenant 1 queued.
  CHECK(s.Enqueue(0, Req(3, 2)).ok());
}

TEST_CASE("under fifo and edf no request is refused for its predicted wait") {
  Scheduler s = Make({0, 0, 0, 0.001});
  REQUIRE(s.SetDiscipline(Discipline::kFifo).ok());
  (void)s.Next(0);
  for (int n = 0; n < 500; ++n) {
    REQUIRE(s.Enqueue(0, Req(3)).ok());
  }
}

// Dispatches (one request each) until `count` level-3 requests ran under a level-1 flood that
// is topped up after every dispatch; the dispatch number of each level-3 one (1-based).
std::vector<int> LowerLevelTurns(double share, int count, int limit) {
  SchedulerConfig config;
  config.lower_level_share = share;
  Scheduler s = testing::Make({testing::Spec("m", {1})}, config);
  for (int n = 0; n < 5; ++n) {
    REQUIRE(s.Enqueue(0, testing::Req(n, 1, {}, 100 + n)).ok());  // Level 2 (default).
  }
  for (int n = 0; n < 64; ++n) {
    REQUIRE(s.Enqueue(0, Req(1)).ok());
  }
  for (int n = 0; n < count; ++n) {
    QueuedRequest r = Req(3);
    r.payload = 1000 + n;
    r.arrival = n;
    REQUIRE(s.Enqueue(0, r).ok());
  }
  std::vector<int> turns;
  for (int d = 1; d <= limit && static_cast<int>(turns.size()) < count; ++d) {
    Decision decision = s.Next(0);
    REQUIRE(decision.dispatch.runs());
    const QueuedRequest& ran = decision.dispatch.requests.front();
    if (ran.priority == 3) {
      CHECK(ran.payload == 1000 + turns.size());  // The oldest first.
      turns.push_back(d);
    }
    if (ran.priority == 1) {
      REQUIRE(s.Enqueue(0, Req(1)).ok());  // The flood never ends.
    }
    s.Complete(decision.dispatch, 0.001, 0);
  }
  return turns;
}

TEST_CASE("lower levels get their share of a flow's dispatches under a flood of urgent ones") {
  // lower_level_share 0.05: every 20th dispatch is led by the oldest less urgent request (the
  // level-2 ones first: they are older), so the k-th level-3 request runs by dispatch 20 (5 + k).
  std::vector<int> turns = LowerLevelTurns(0.05, 4, 1000);
  REQUIRE(turns.size() == 4);
  for (size_t k = 0; k < turns.size(); ++k) {
    CHECK(turns[k] <= static_cast<int>(20 * (5 + k + 1)));
  }
  // Strict priority (0): level 3 never runs while level 1 floods.
  CHECK(LowerLevelTurns(0.0, 4, 1000).empty());
  SchedulerConfig bad;
  bad.lower_level_share = 0.6;
  CHECK_FALSE(Scheduler::Create(bad, {testing::Spec("m")}).ok());
}

}  // namespace
}  // namespace ferry
