// A node's load for a balancer: state and weight at their boundaries.
#include "shm/node_load.h"

#include <doctest/doctest.h>

#include <memory>

namespace ferry::shm {
namespace {

WorkerLoad Ready(uint32_t index, uint64_t outstanding) {
  return {index, true, outstanding, outstanding / 2};
}

TEST_CASE("the weight falls from 100 to 1 as the ready workers fill; down with none ready") {
  CHECK(ComputeNodeLoad({Ready(0, 0), Ready(1, 0)}, false).weight == 100);
  CHECK(AgentReply(ComputeNodeLoad({Ready(0, 0), Ready(1, 0)}, false)) == "up 100%\n");
  // 64 of 128 held: half.
  CHECK(ComputeNodeLoad({Ready(0, 64), Ready(1, 0)}, false).weight == 50);
  CHECK(ComputeNodeLoad({Ready(0, 127), Ready(1, 0)}, false).weight == 1);
  CHECK(ComputeNodeLoad({Ready(0, 5000), Ready(1, 5000)}, false).weight == 1);  // Never 0.
  // A worker not ready adds no capacity, and what it holds is not counted.
  WorkerLoad stopped{1, false, 999, 999};
  CHECK(ComputeNodeLoad({Ready(0, 32), stopped}, false).weight == 50);
  NodeLoad down = ComputeNodeLoad({stopped}, false);
  CHECK(down.state == "down");
  CHECK(AgentReply(down) == "down\n");
  CHECK(AgentReply(ComputeNodeLoad({Ready(0, 0)}, true)) == "drain\n");
}

TEST_CASE("a worker's load sums its listed models; a snapshot not ready counts nothing") {
  auto snapshot = std::make_unique<StatusSnapshotData>();
  snapshot->state = static_cast<uint32_t>(ProcessState::kReady);
  snapshot->num_models = 2;
  snapshot->models[0].outstanding = 3;
  snapshot->models[0].queue_depth = 2;
  snapshot->models[1].outstanding = 4;
  snapshot->models[2].outstanding = 1000;  // Not listed.
  WorkerLoad load = LoadOfWorker(7, snapshot.get());
  CHECK(load.index == 7);
  CHECK(load.ready);
  CHECK(load.outstanding == 7);
  CHECK(load.queued == 2);
  snapshot->num_models = 1'000'000;  // A hostile count: bounded by kMaxStatusModels.
  CHECK(LoadOfWorker(7, snapshot.get()).ready);
  snapshot->state = static_cast<uint32_t>(ProcessState::kDraining);
  CHECK_FALSE(LoadOfWorker(7, snapshot.get()).ready);
  CHECK_FALSE(LoadOfWorker(7, nullptr).ready);
}

}  // namespace
}  // namespace ferry::shm
