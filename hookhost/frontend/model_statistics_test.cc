#include "hookhost/frontend/model_statistics.h"

#include <doctest/doctest.h>

#include <limits>
#include <memory>

namespace ferry::frontend {
namespace {

// A worker's status with one entry per name.
std::unique_ptr<shm::StatusSnapshotData> Worker(std::vector<std::string> names) {
  auto s = std::make_unique<shm::StatusSnapshotData>();
  s->num_models = static_cast<uint32_t>(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    shm::CopyName(s->models[i].name, names[i]);
  }
  return s;
}

void Answered(shm::ModelStatusData& m, uint64_t ok, uint64_t rows, uint64_t ok_ns,
              uint64_t compute_ns) {
  m.answers.ok_requests = ok;
  m.answers.ok_rows = rows;
  m.answers.ok_ns = ok_ns;
  m.answers.compute_ns = compute_ns;
}

TEST_CASE("a model's statistics are summed over the workers that serve it") {
  auto a = Worker({"mlp", "cnn"});
  auto b = Worker({"cnn", "mlp"});  // Another order: entries are matched by name.
  Answered(a->models[0], 10, 40, 1000, 500);
  a->models[0].answers.failed_requests = 2;
  a->models[0].answers.failed_ns = 30;
  a->models[0].answers.last_answer_unix_ms = 1700;
  a->models[0].queue_wait_count = 10;
  a->models[0].queue_wait_sum_ns = 70;
  a->models[0].answers.batches[0] = {4, 3, 300};
  a->models[0].answers.batches[1] = {8, 1, 200};
  Answered(b->models[1], 5, 5, 100, 50);
  b->models[1].answers.last_answer_unix_ms = 1600;
  b->models[1].queue_wait_count = 5;
  b->models[1].queue_wait_sum_ns = 5;
  b->models[1].answers.batches[0] = {1, 5, 50};
  b->models[1].answers.batches[1] = {4, 1, 10};
  Answered(b->models[0], 99, 99, 99, 99);  // The other model: not counted.

  ModelStatistics s = SumModelStatistics("mlp", "mlp", "1", {*a, *b});
  CHECK(s.name == "mlp");
  CHECK(s.version == "1");
  CHECK(s.success.count == 15);
  CHECK(s.success.ns == 1100);
  CHECK(s.fail.count == 2);
  CHECK(s.fail.ns == 30);
  CHECK(s.queue.count == 15);
  CHECK(s.queue.ns == 75);
  CHECK(s.compute_infer.count == 15);
  CHECK(s.compute_infer.ns == 550);
  CHECK(s.compute_input.count == 15);
  CHECK(s.compute_input.ns == 0);
  CHECK(s.inference_count == 45);
  CHECK(s.execution_count == 10);
  CHECK(s.last_inference == 1700);
  REQUIRE(s.batch_stats.size() == 3);  // Sizes 1, 4 (both workers), 8: ascending.
  CHECK(s.batch_stats[0].batch_size == 1);
  CHECK(s.batch_stats[1].batch_size == 4);
  CHECK(s.batch_stats[1].compute_infer.count == 4);
  CHECK(s.batch_stats[1].compute_infer.ns == 310);
  CHECK(s.batch_stats[2].batch_size == 8);
}

TEST_CASE("numbers a worker lies about cannot wrap a sum or invent a batch size") {
  auto a = Worker({"mlp"});
  auto b = Worker({"mlp"});
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  Answered(a->models[0], kMax - 1, kMax, kMax, kMax);
  Answered(b->models[0], 5, 5, 5, 5);
  a->models[0].queue_wait_sum_ns = -100;  // Negative: counts as 0.
  a->models[0].queue_wait_count = 1;
  a->models[0].answers.batches[0] = {-4, 7, 7};                // Not a size.
  a->models[0].answers.batches[1] = {int64_t{1} << 40, 7, 7};  // Not a compiled size.
  a->models[0].answers.batches[2] = {2, 0, 7};                 // Never ran: no entry.
  b->models[0].answers.batches[0] = {2, kMax, kMax};
  a->num_models = 1000;  // Past the table: read as kMaxStatusModels entries.
  ModelStatistics s = SumModelStatistics("mlp", "mlp", "1", {*a, *b});
  CHECK(s.success.count == kMax);
  CHECK(s.success.ns == kMax);
  CHECK(s.inference_count == kMax);
  CHECK(s.queue.ns == 0);
  REQUIRE(s.batch_stats.size() == 1);
  CHECK(s.batch_stats[0].batch_size == 2);
  CHECK(s.execution_count == kMax);
}

TEST_CASE("an unloaded entry, an unterminated name or another model adds nothing") {
  auto a = Worker({"mlp"});
  Answered(a->models[0], 3, 3, 3, 3);
  a->models[0].state = static_cast<uint32_t>(shm::ModelLoadState::kUnloaded);
  auto b = Worker({});
  b->num_models = 1;
  std::memset(b->models[0].name, 'm', sizeof(b->models[0].name));  // No NUL at all.
  Answered(b->models[0], 4, 4, 4, 4);
  ModelStatistics s = SumModelStatistics("mlp", "mlp", "1", {*a, *b});
  CHECK(s.success.count == 0);
  CHECK(s.batch_stats.empty());
  CHECK(s.last_inference == 0);
}

TEST_CASE("the JSON and the proto carry Triton's fields") {
  ModelStatistics s;
  s.name = "mlp";
  s.version = "3";
  s.inference_count = 12;
  s.execution_count = 2;
  s.success = {3, 300};
  s.queue = {3, 30};
  s.compute_infer = {3, 90};
  s.batch_stats.push_back({4, {2, 0}, {2, 80}, {2, 0}});
  nlohmann::json j = StatisticsJson({s});
  REQUIRE(j["model_stats"].size() == 1);
  const nlohmann::json& m = j["model_stats"][0];
  CHECK(m["name"] == "mlp");
  CHECK(m["version"] == "3");
  CHECK(m["inference_count"] == 12);
  CHECK(m["execution_count"] == 2);
  for (const char* key : {"success", "fail", "queue", "compute_input", "compute_infer",
                          "compute_output", "cache_hit", "cache_miss"}) {
    CAPTURE(key);
    CHECK(m["inference_stats"][key].contains("count"));
    CHECK(m["inference_stats"][key].contains("ns"));
  }
  CHECK(m["inference_stats"]["success"]["ns"] == 300);
  CHECK(m["batch_stats"][0]["batch_size"] == 4);
  CHECK(m["batch_stats"][0]["compute_infer"]["ns"] == 80);

  inference::ModelStatisticsResponse proto;
  StatisticsProto({s}, &proto);
  REQUIRE(proto.model_stats_size() == 1);
  CHECK(proto.model_stats(0).version() == "3");
  CHECK(proto.model_stats(0).inference_stats().compute_infer().ns() == 90);
  CHECK(proto.model_stats(0).inference_stats().queue().count() == 3);
  REQUIRE(proto.model_stats(0).batch_stats_size() == 1);
  CHECK(proto.model_stats(0).batch_stats(0).compute_infer().count() == 2);
}

}  // namespace
}  // namespace ferry::frontend
