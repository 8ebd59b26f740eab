// Residency in the scheduler: a model whose weights are out is never selected, the next cold
// load is chosen by the discipline, and a load is charged to its model's fair share, so the
// lag bound of docs/scheduler.md holds across an eviction and the reload that follows.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "worker/scheduler/scheduler_testing.h"

namespace ferry {
namespace {

using testing::kMs;
using testing::Make;
using testing::Push;
using testing::Req;
using testing::Spec;

TEST_CASE("a model whose weights are out keeps its queue and is never selected") {
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})});
  s.SetResident(1, false);
  Push(s, 0, Req(0));
  Push(s, 1, Req(0));
  Push(s, 1, Req(kMs));
  Decision first = s.Next(2 * kMs);
  REQUIRE(first.dispatch.runs());
  CHECK(first.dispatch.model == 0);
  s.Complete(first.dispatch, 0.001, 3 * kMs);
  CHECK_FALSE(s.Next(3 * kMs).dispatch.runs());  // Only b is queued, and it is out.
  CHECK(s.queue_depth(1) == 2);
  CHECK(s.NextColdLoad() == 1);
  s.SetResident(1, true);
  CHECK(s.NextColdLoad() == -1);
  Decision second = s.Next(4 * kMs);
  REQUIRE(second.dispatch.runs());
  CHECK(second.dispatch.model == 1);
}

TEST_CASE("every discipline skips a model that is out") {
  for (Discipline discipline : {Discipline::kFair, Discipline::kFifo, Discipline::kEdf}) {
    CAPTURE(DisciplineName(discipline));
    SchedulerConfig config;
    config.discipline = discipline;
    Scheduler s = Make({Spec("a", {1}), Spec("b", {1})}, config);
    Push(s, 0, Req(0, 1, 100 * kMs));  // a is older and more urgent, but out.
    Push(s, 1, Req(kMs, 1, 200 * kMs));
    s.SetResident(0, false);
    Decision d = s.Next(2 * kMs);
    REQUIRE(d.dispatch.runs());
    CHECK(d.dispatch.model == 1);
  }
  SchedulerOptions round_robin;
  round_robin.round_robin = true;
  Scheduler rr = Make({Spec("a", {1}), Spec("b", {1})}, {}, round_robin);
  Push(rr, 0, Req(0));
  Push(rr, 1, Req(0));
  rr.SetResident(0, false);
  CHECK(rr.Next(kMs).dispatch.model == 1);
}

TEST_CASE("a committed sub-call of a model that is out waits for its weights") {
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})});
  QueuedRequest sub = Req(0);
  sub.meta_id = 7;
  REQUIRE(s.EnqueueCommitted(0, sub).ok());
  Push(s, 1, Req(0));
  s.SetResident(0, false);
  Decision d = s.Next(kMs);
  REQUIRE(d.dispatch.runs());
  CHECK(d.dispatch.model == 1);
  CHECK(s.CommittedPending(7));
  s.SetResident(0, true);
  Decision next = s.Next(2 * kMs);
  CHECK(next.dispatch.model == 0);
  CHECK(next.dispatch.committed_meta);
}

TEST_CASE("the next cold load: at its model's turn, fair by start tag, fifo by age") {
  Scheduler fair = Make({Spec("a", {1}), Spec("b", {1}), Spec("c", {1})});
  Push(fair, 0, Req(0));
  Push(fair, 1, Req(kMs));
  Push(fair, 2, Req(kMs));
  Decision d = fair.Next(kMs);  // a's finish tag moves past b's and c's start.
  REQUIRE(d.dispatch.model == 0);
  fair.Complete(d.dispatch, 0.010, 11 * kMs);
  Push(fair, 0, Req(11 * kMs));
  for (int m : {0, 1, 2}) {
    fair.SetResident(m, false);
  }
  fair.ChargeLoad(1, 0.050);  // b loaded (and was evicted again): 50 ms on its share.
  CHECK(fair.NextColdLoad() == 2);
  fair.SetResident(2, true);
  CHECK(fair.NextColdLoad() == -1);  // c, resident, comes first: no load runs ahead of it.
  Decision c = fair.Next(12 * kMs);
  REQUIRE(c.dispatch.model == 2);
  fair.Complete(c.dispatch, 0.020, 32 * kMs);
  CHECK(fair.NextColdLoad() == 0);  // a at 10 ms, b at 50 ms.

  SchedulerConfig config;
  config.discipline = Discipline::kFifo;
  Scheduler fifo = Make({Spec("a", {1}), Spec("b", {1})}, config);
  Push(fifo, 0, Req(5 * kMs));
  Push(fifo, 1, Req(2 * kMs));
  fifo.SetResident(0, false);
  fifo.SetResident(1, false);
  CHECK(fifo.NextColdLoad() == 1);
  fifo.SetResident(1, true);
  CHECK(fifo.NextColdLoad() == -1);                    // b's older request runs first.
  CHECK(Make({Spec("a", {1})}).NextColdLoad() == -1);  // Nothing queued.
}

// Two backlogged models of weights 1 and 2, each dispatch 1 ms; b is evicted for a while
// and reloaded at a cost of 20 ms charged to its share. SFQ's bound between two backlogged
// models: |S_a / w_a - S_b / w_b| <= d_a / w_a + d_b / w_b over any interval both are
// backlogged, where S counts GPU time and, for b, the load charged to it (its own dispatch,
// d_b = the 20 ms load, being the largest).
TEST_CASE("fair share holds across an eviction and a charged reload") {
  Scheduler s = Make({Spec("a", {1}), Spec("b", {1})});
  REQUIRE(s.SetPolicy("b", 2.0).ok());
  Nanos now = 0;
  std::map<int, double> served;
  auto step = [&] {
    for (int m : {0, 1}) {
      if (s.queue_depth(m) == 0) {
        Push(s, m, Req(now));
      }
    }
    Decision d = s.Next(now);
    REQUIRE(d.dispatch.runs());
    now += kMs;
    s.Complete(d.dispatch, 0.001, now);
    served[d.dispatch.model] += 0.001;
  };
  for (int i = 0; i < 60; ++i) {
    step();
  }
  s.SetResident(1, false);  // Evicted: a runs alone meanwhile.
  for (int i = 0; i < 40; ++i) {
    step();
    CHECK(served.count(1) == 1);
  }
  s.SetResident(1, true);
  s.ChargeLoad(1, 0.020);
  served.clear();
  served[1] = 0.020;
  double bound = 0.001 / 1.0 + 0.020 / 2.0;
  for (int i = 0; i < 300; ++i) {
    step();
    CHECK(std::abs(served[0] / 1.0 - served[1] / 2.0) <= bound + 1e-9);
  }
  CHECK(served[1] / served[0] == doctest::Approx(2.0).epsilon(0.1));
}

}  // namespace
}  // namespace ferry
