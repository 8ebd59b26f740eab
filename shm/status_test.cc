#include "shm/status.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "shm/control.h"
#include "shm/descriptor.h"
#include "shm/recovery.h"
#include "tests/testing/shm_name.h"

namespace ferry::shm {
namespace {

struct Fixture {
  std::string name = testing::UniqueShmName("status");
  Segment segment = Segment::Create(name, {1, 1, 16, 8 << 20}).value();
  ~Fixture() { Segment::Remove(name); }
};

// Every field of the snapshot carries the same number, so a torn copy shows as a mismatch.
StatusSnapshotData Filled(uint64_t n) {
  StatusSnapshotData s{};
  s.state = static_cast<uint32_t>(n);
  s.num_models = kMaxStatusModels;
  s.dispatches = n;
  s.host_gap_samples = n;
  for (auto& m : s.models) {
    m.dispatch_count = n;
    m.requests_served = n;
    m.effective_max_batch = static_cast<int64_t>(n);
    m.weight = static_cast<double>(n);
  }
  return s;
}

// Only the first num_models entries of a snapshot read are defined (ReadStatus copies no
// more), and the writer lists them all: before its first publish there are none.
bool Consistent(const StatusSnapshotData& s) {
  uint64_t n = s.dispatches;
  if (s.state != static_cast<uint32_t>(n) || s.host_gap_samples != n ||
      s.num_models != (n == 0 ? 0 : kMaxStatusModels)) {
    return false;
  }
  for (uint32_t i = 0; i < s.num_models; ++i) {
    const ModelStatusData& m = s.models[i];
    if (m.dispatch_count != n || m.requests_served != n ||
        m.effective_max_batch != static_cast<int64_t>(n) || m.weight != static_cast<double>(n)) {
      return false;
    }
  }
  return true;
}

TEST_CASE("a reader never sees a torn status snapshot while the writer publishes") {
  Fixture f;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0};
  uint64_t published = 0;
  // The writer publishes at least 20000 times and goes on until the reader has read 100 times
  // meanwhile, so the reads overlap the publishes however the two threads are scheduled.
  std::thread writer([&] {
    StatusWriter w(f.segment, 1);
    for (uint64_t n = 1; n <= 20000 || reads.load() < 100; ++n) {
      w.Publish(Filled(n));
      w.Beat();
      published = n;
    }
    done = true;
  });
  uint64_t last = 0;
  bool monotonic = true;
  do {
    // The writer here publishes back to back (production: every few milliseconds), so a
    // read may need many attempts.
    Result<StatusSnapshotData> s = ReadStatus(f.segment, 1, 1 << 30);
    REQUIRE(s.ok());
    REQUIRE(Consistent(*s));
    monotonic = monotonic && s->dispatches >= last;
    last = s->dispatches;
    ++reads;
  } while (!done.load());
  writer.join();
  CHECK(monotonic);
  CHECK(reads.load() >= 100);
  CHECK(ReadHeartbeat(f.segment, 1) == published);
  CHECK(ReadStatus(f.segment, 1)->dispatches == published);
}

TEST_CASE("a writer that died mid-write leaves the status unreadable until ResetSlot") {
  Fixture f;
  StatusWriter(f.segment, 1).Publish(Filled(7));
  f.segment.status(1).sequence.fetch_add(1);  // Dead between the odd and the even store.
  Result<StatusSnapshotData> s = ReadStatus(f.segment, 1, 10);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == ErrorCode::kUnavailable);
  ResetSlot(f.segment, 1);
  s = ReadStatus(f.segment, 1);
  REQUIRE(s.ok());
  CHECK(s->state == static_cast<uint32_t>(ProcessState::kStopped));
  // Its successor writes from a settled sequence.
  StatusWriter(f.segment, 1).Publish(Filled(9));
  CHECK(ReadStatus(f.segment, 1)->dispatches == 9);
}

TEST_CASE("a status held torn for a moment is waited for, one held torn longer is not") {
  Fixture f;
  StatusWriter(f.segment, 1).Publish(Filled(7));
  std::atomic<uint64_t>& sequence = f.segment.status(1).sequence;
  sequence.fetch_add(1);  // A writer preempted mid-publish.
  CHECK_FALSE(ReadStatus(f.segment, 1, 64).ok());
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    sequence.fetch_add(1);  // It runs again and finishes.
  });
  Result<StatusSnapshotData> settled = ReadSettledStatus(f.segment, 1, 5'000'000'000);
  writer.join();
  REQUIRE(settled.ok());
  CHECK(settled->dispatches == 7);
  sequence.fetch_add(1);  // Torn past the patience: UNAVAILABLE, after about the patience.
  auto start = std::chrono::steady_clock::now();
  Result<StatusSnapshotData> torn = ReadSettledStatus(f.segment, 1, 10'000'000);
  CHECK_FALSE(torn.ok());
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(10));
  sequence.fetch_add(1);
}

TEST_CASE("strings and counts from a hostile status writer are bounded when read") {
  Fixture f;
  StatusSnapshotData s = Filled(1);
  s.num_models = 1u << 30;
  for (auto& m : s.models) {
    std::memset(m.name, 'x', sizeof(m.name));
    std::memset(m.error, 'y', sizeof(m.error));
  }
  StatusWriter(f.segment, 0).Publish(s);
  Result<StatusSnapshotData> read = ReadStatus(f.segment, 0);
  REQUIRE(read.ok());
  CHECK(read->num_models == kMaxStatusModels);
  CHECK(std::string(read->models[0].name).size() == sizeof(read->models[0].name) - 1);
  CHECK(std::string(read->models[63].error).size() == sizeof(read->models[63].error) - 1);
}

TEST_CASE("control messages round-trip and hostile ones are refused") {
  ControlMessage m{ControlCode::kSetPolicy, 2, 3.5, 0};
  Result<ControlMessage> back = DecodeControl(EncodeControl(m, 9), 3);
  REQUIRE(back.ok());
  CHECK(back->code == ControlCode::kSetPolicy);
  CHECK(back->model == 2);
  CHECK(back->weight == 3.5);
  CHECK_FALSE(DecodeControl(EncodeControl(m, 9), 2).ok());  // Model out of range.
  for (double w : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetPolicy, 0, w, 0}, 1), 1).ok());
  }
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetResidency, 0, 0, 3}, 1), 1).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetDiscipline, 0, 0, -1}, 1), 1).ok());
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetDiscipline, 0, 0, 2}, 1), 1).ok());
  DescriptorData bad = EncodeControl({ControlCode::kStop, 0, 0, 0}, 1);
  bad.variant = 99;
  CHECK_FALSE(DecodeControl(bad, 1).ok());
  bad.variant = 0;
  CHECK_FALSE(DecodeControl(bad, 1).ok());
  bad = EncodeControl({ControlCode::kStop, 0, 0, 0}, 1);
  bad.kind = static_cast<uint16_t>(DescriptorKind::kSubmit);
  CHECK_FALSE(DecodeControl(bad, 1).ok());
  // The batch cap names a model; 0 lifts it; a negative cap or a queue depth below 1 is refused.
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetMaxBatchSize, 0, 0, 8}, 1), 1).ok());
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetMaxBatchSize, 0, 0, 0}, 1), 1).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetMaxBatchSize, 1, 0, 8}, 1), 1).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetMaxBatchSize, 0, 0, -1}, 1), 1).ok());
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetMaxQueueDepth, 0, 0, 1}, 1), 1).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetMaxQueueDepth, 0, 0, 0}, 1), 1).ok());
  // A tenant's weight: tenant 1..kMaxTenants in value, a finite weight > 0.
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetTenantWeight, 0, 2.0, 1}, 1), 1).ok());
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetTenantWeight, 0, 2.0, kMaxTenants}, 1), 1)
            .ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetTenantWeight, 0, 2.0, 0}, 1), 1).ok());
  CHECK_FALSE(
      DecodeControl(EncodeControl({ControlCode::kSetTenantWeight, 0, 2.0, kMaxTenants + 1}, 1), 1)
          .ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetTenantWeight, 0, 0, 1}, 1), 1).ok());
  CHECK_FALSE(
      DecodeControl(EncodeControl({ControlCode::kSetTenantWeight, 0, -INFINITY, 1}, 1), 1).ok());
  bad = EncodeControl({ControlCode::kStop, 0, 0, 0}, 1);
  bad.variant = 13;
  CHECK_FALSE(DecodeControl(bad, 1).ok());
  // Stop names no model: any model field is ignored.
  CHECK(DecodeControl(EncodeControl({ControlCode::kStop, 77, 0, 0}, 1), 1).ok());
}

TEST_CASE("model table changes: a load names the next index and a valid name, within its field") {
  ControlMessage load{ControlCode::kLoadModel, 3, 0, 0};
  load.name = "resnet-50.v2";
  Result<ControlMessage> back = DecodeControl(EncodeControl(load, 4), 3);
  REQUIRE(back.ok());
  CHECK(back->code == ControlCode::kLoadModel);
  CHECK(back->model == 3);
  CHECK(back->name == "resnet-50.v2");
  CHECK(DecodeControl(EncodeControl(load, 4), 2).error().message ==
        "control 4: a load must name the next index, 2, not 3");
  CHECK_FALSE(DecodeControl(EncodeControl(load, 4), 4).ok());
  for (const char* name : {"", "..", "a/b", "with space"}) {
    CAPTURE(name);
    load.name = name;
    CHECK(DecodeControl(EncodeControl(load, 4), 3).error().message ==
          "control 4: the model name to load is not a valid name");
  }
  // A name filling its field with no NUL, or a descriptor not declaring the bytes it holds.
  load.name = "ok";
  DescriptorData d = EncodeControl(load, 4);
  std::memset(d.tensors, 'a', 136);
  CHECK_FALSE(DecodeControl(d, 3).ok());
  d = EncodeControl(load, 4);
  d.num_tensors = 1;
  CHECK_FALSE(DecodeControl(d, 3).ok());
  // A residency floor names a model in range and a level.
  CHECK(DecodeControl(EncodeControl({ControlCode::kSetResidencyFloor, 2, 0, 0}, 1), 3).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetResidencyFloor, 2, 0, 3}, 1), 3).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kSetResidencyFloor, 3, 0, 0}, 1), 3).ok());
  // An unload names a model in range.
  CHECK(DecodeControl(EncodeControl({ControlCode::kUnloadModel, 2, 0, 0}, 1), 3).ok());
  CHECK_FALSE(DecodeControl(EncodeControl({ControlCode::kUnloadModel, 3, 0, 0}, 1), 3).ok());
}

}  // namespace
}  // namespace ferry::shm
