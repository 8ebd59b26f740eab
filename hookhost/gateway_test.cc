// The gateway against scripted worker states: eligibility, resident preference, each mode,
// and the refusals when no worker can take a request.
#include "hookhost/gateway.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

namespace ferry::hookhost {
namespace {

WorkerView Ready(uint64_t outstanding = 0) {
  WorkerView v;
  v.ready = true;
  v.has_model = true;
  v.resident = true;
  v.max_queue_depth = 16;
  v.outstanding = outstanding;
  v.arena_free = 1 << 20;
  return v;
}

size_t Pick(Gateway& g, const std::vector<WorkerView>& w, uint64_t bytes = 1024) {
  Result<size_t> chosen = g.Choose(0, "m", bytes, w);
  REQUIRE_MESSAGE(chosen.ok(), (chosen.ok() ? "" : chosen.error().message));
  return *chosen;
}

TEST_CASE("eligibility: ready, model loaded, queue not full, arena room; at the edges") {
  Gateway g(GatewayMode::kRoundRobin, 1);
  std::vector<WorkerView> w(2, Ready());
  w[0].ready = false;
  for (int i = 0; i < 4; ++i) CHECK(Pick(g, w) == 1);
  w[0] = Ready();
  w[0].has_model = false;
  for (int i = 0; i < 4; ++i) CHECK(Pick(g, w) == 1);
  w[0] = Ready();
  w[0].queue_depth = 16;  // At its limit: full.
  for (int i = 0; i < 4; ++i) CHECK(Pick(g, w) == 1);
  w[0].queue_depth = 15;  // One below: eligible.
  CHECK(Pick(g, w) == 0);
  w[0] = Ready();
  w[0].arena_free = 1023;  // One byte short of the outputs.
  for (int i = 0; i < 4; ++i) CHECK(Pick(g, w, 1024) == 1);
  w[0].arena_free = 1024;  // Exactly enough.
  CHECK(Pick(g, w, 1024) == 0);
}

TEST_CASE("a stalled worker gets requests only when no responsive one can take them") {
  for (GatewayMode mode :
       {GatewayMode::kRoundRobin, GatewayMode::kLeastOutstanding, GatewayMode::kLptPacking}) {
    Gateway g(mode, 1);
    g.Repack(std::vector<double>{1.0}, 2);  // lpt_packing places the model on worker 0.
    std::vector<WorkerView> w = {Ready(0), Ready(5)};
    w[0].responsive = false;  // Stopped, with the fewest outstanding: still passed over.
    for (int i = 0; i < 4; ++i) CHECK(Pick(g, w) == 1);
    w[1].queue_depth = 16;  // The responsive one is full: the stalled one is better than none.
    CHECK(Pick(g, w) == 0);
    w[1].queue_depth = 0;
    w[1].responsive = false;  // Both stalled: served as before.
    CHECK(Pick(g, w) < 2);
    w[0].responsive = true;  // Back: preferred again.
    CHECK(Pick(g, w) == 0);
  }
}

TEST_CASE("no eligible worker: UNAVAILABLE or RESOURCE_EXHAUSTED with the reason") {
  Gateway g(GatewayMode::kLeastOutstanding, 1);
  std::vector<WorkerView> none;
  Result<size_t> empty = g.Choose(0, "mlp", 1, none);
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().code == ErrorCode::kUnavailable);
  CHECK(empty.error().message == "model 'mlp': no worker is ready (retry in 100 ms)");

  std::vector<WorkerView> w(2, Ready());
  w[0].ready = false;
  w[1].has_model = false;
  Result<size_t> missing = g.Choose(0, "mlp", 1, w);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ErrorCode::kUnavailable);
  CHECK(missing.error().message == "model 'mlp' is loaded on no ready worker");
  w[1].failure = "its weights take 9 bytes; the worker's weight budget is 8 bytes";
  Result<size_t> failed = g.Choose(0, "mlp", 1, w);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().message ==
        "model 'mlp' failed to load: its weights take 9 bytes; the worker's weight budget is 8 "
        "bytes");

  w = {Ready(), Ready()};
  w[0].queue_depth = w[1].queue_depth = 16;
  Result<size_t> full = g.Choose(0, "mlp", 1, w);
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == ErrorCode::kResourceExhausted);
  CHECK(full.error().message.find("full queue (retry in 100 ms)") != std::string::npos);

  w = {Ready(), Ready()};
  w[0].arena_free = w[1].arena_free = 10;
  Result<size_t> arena = g.Choose(0, "mlp", 11, w);
  REQUIRE_FALSE(arena.ok());
  CHECK(arena.error().code == ErrorCode::kResourceExhausted);
  CHECK(arena.error().message.find("full arena") != std::string::npos);
}

TEST_CASE("round_robin takes each eligible worker in turn, skipping the ineligible") {
  Gateway g(GatewayMode::kRoundRobin, 1);
  std::vector<WorkerView> w(3, Ready());
  std::vector<size_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(Pick(g, w));
  CHECK(got == std::vector<size_t>{0, 1, 2, 0, 1, 2});
  w[1].ready = false;
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(Pick(g, w));
  CHECK(got == std::vector<size_t>{0, 2, 0, 2});
}

TEST_CASE("least_outstanding picks the fewest in flight; ties rotate") {
  Gateway g(GatewayMode::kLeastOutstanding, 1);
  std::vector<WorkerView> w{Ready(5), Ready(2), Ready(9)};
  CHECK(Pick(g, w) == 1);
  w[1].outstanding = 7;
  CHECK(Pick(g, w) == 0);
  std::vector<WorkerView> tied(3, Ready(4));
  std::vector<size_t> got;
  for (int i = 0; i < 3; ++i) got.push_back(Pick(g, tied));
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<size_t>{0, 1, 2});  // Each once, not worker 0 three times.
}

TEST_CASE("a worker holding the model's weights is preferred over one that must load them") {
  for (GatewayMode mode : {GatewayMode::kRoundRobin, GatewayMode::kLeastOutstanding}) {
    Gateway g(mode, 1);
    std::vector<WorkerView> w{Ready(0), Ready(50)};
    w[0].resident = false;  // Idle, but would have to load.
    for (int i = 0; i < 4; ++i) CHECK(Pick(g, w) == 1);
    w[1].resident = false;  // Neither resident: both are candidates again.
    CHECK(Pick(g, w) == 0);
  }
}

TEST_CASE("lpt_packing places heaviest first on the lightest worker and serves there") {
  Gateway g(GatewayMode::kLptPacking, 5);
  CHECK(g.placed(0) == -1);
  // Loads 5, 4, 3, 3, 1 on two workers: 5 -> w0, 4 -> w1, 3 -> w1 (4 < 5), 3 -> w0 (5 < 7),
  // 1 -> w1 (7 < 8): w0 = 8, w1 = 8.
  std::vector<double> load{3, 5, 1, 4, 3};
  g.Repack(load, 2);
  CHECK(g.placed(1) == 0);
  CHECK(g.placed(3) == 1);
  CHECK(g.placed(0) == 1);
  CHECK(g.placed(4) == 0);
  CHECK(g.placed(2) == 1);
  std::vector<WorkerView> w{Ready(100), Ready(0)};
  for (int i = 0; i < 3; ++i) {
    Result<size_t> chosen = g.Choose(1, "heavy", 1, w);
    REQUIRE(chosen.ok());
    CHECK(*chosen == 0);  // Its placement, although busier.
  }
  w[0].ready = false;  // Its worker is gone: served by the others meanwhile.
  Result<size_t> moved = g.Choose(1, "heavy", 1, w);
  REQUIRE(moved.ok());
  CHECK(*moved == 1);
  g.Repack(std::vector<double>{0, 0, 0, 0, 0}, 3);  // Unmeasured models spread, not all on w0.
  CHECK(g.placed(0) == 0);
  CHECK(g.placed(1) == 1);
  CHECK(g.placed(2) == 2);
  CHECK(g.placed(3) == 0);
}

TEST_CASE("a sequence goes to one worker whatever the load, and moves only with its worker") {
  std::vector<WorkerView> w = {Ready(), Ready(), Ready(), Ready()};
  std::vector<uint32_t> slots = {5, 6, 7, 8};
  std::vector<size_t> chosen;
  std::vector<int> per_worker(4, 0);
  for (uint64_t key = 1; key <= 400; ++key) {
    Result<size_t> c = Gateway::ChooseForSequence("m", key, 1, w, slots);
    REQUIRE(c.ok());
    chosen.push_back(*c);
    ++per_worker[*c];
    w[*c].outstanding += 100;  // Load does not move a sequence.
    CHECK(*Gateway::ChooseForSequence("m", key, 1, w, slots) == *c);
  }
  for (int n : per_worker) {
    CHECK(n > 50);  // Spread: about 100 each.
  }
  // The same slots in another order (another hook host's list): the same workers by slot.
  std::vector<uint32_t> reversed = {8, 7, 6, 5};
  for (uint64_t key = 1; key <= 400; ++key) {
    size_t c = *Gateway::ChooseForSequence("m", key, 1, w, reversed);
    CHECK(reversed[c] == slots[chosen[key - 1]]);
  }
  // Worker 2's model fails: only its sequences move.
  w[2].failure = "out of memory";
  for (uint64_t key = 1; key <= 400; ++key) {
    size_t c = *Gateway::ChooseForSequence("m", key, 1, w, slots);
    if (chosen[key - 1] != 2) {
      CHECK(c == chosen[key - 1]);
    } else {
      CHECK(c != 2);
    }
  }
}

TEST_CASE("a sequence's worker not ready or full: refused, never sent elsewhere") {
  std::vector<WorkerView> w = {Ready(), Ready()};
  std::vector<uint32_t> slots = {3, 4};
  size_t home = *Gateway::ChooseForSequence("m", 42, 1, w, slots);
  w[home].ready = false;
  Result<size_t> down = Gateway::ChooseForSequence("m", 42, 1, w, slots);
  REQUIRE_FALSE(down.ok());
  CHECK(down.error().code == ErrorCode::kUnavailable);
  CHECK(down.error().message.find("slot " + std::to_string(slots[home])) != std::string::npos);
  w[home].ready = true;
  w[home].queue_depth = w[home].max_queue_depth;
  Result<size_t> full = Gateway::ChooseForSequence("m", 42, 1, w, slots);
  REQUIRE_FALSE(full.ok());
  CHECK(full.error().code == ErrorCode::kResourceExhausted);
  w[0].failure = w[1].failure = "bad weights";
  CHECK(Gateway::ChooseForSequence("m", 42, 1, w, slots).error().code == ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace ferry::hookhost
