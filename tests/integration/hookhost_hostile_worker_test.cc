// The hook host treats what a worker writes as hostile too: this test plays the worker (it
// publishes a ready status, pops the hook host's submissions and pushes crafted completions)
// and checks that completions naming unknown requests, memory outside the worker's partition
// or the wrong shapes are refused or fail only their request, never read out of bounds.
#include <doctest/doctest.h>

#include <cstring>

#include "hookhost/hookhost.h"
#include "shm/descriptor.h"
#include "shm/ring.h"
#include "shm/status.h"
#include "tests/testing/hookhost_test.h"
#include "tests/testing/shm_name.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/worker_node.h"

namespace ferry::hookhost {
namespace {

using testing::Get;
using testing::kMlp;

struct FakeWorker {
  testing::TempDir dir;
  std::string name = testing::UniqueShmName("hostile-worker");
  std::string repo = testing::Repository(dir);
  shm::Segment segment = shm::Segment::Create(name, {1, 1, 64, 16 << 20}).value();
  uint32_t slot = segment.WorkerSlot(0);
  shm::RingConsumer submissions{segment, segment.SubmissionRing(0, 0)};
  shm::RingProducer completions{segment, segment.CompletionRing(0, 0)};
  shm::StatusWriter status{segment, slot};

  FakeWorker() {
    auto s = std::make_unique<shm::StatusSnapshotData>();
    s->state = static_cast<uint32_t>(shm::ProcessState::kReady);
    s->generation = segment.generation(slot).load();
    s->num_models = 3;
    for (uint32_t m = 0; m < 3; ++m) {
      shm::CopyName(s->models[m].name, m == 0 ? "broken" : m == 1 ? "cnn" : "mlp");
      s->models[m].state = static_cast<uint32_t>(shm::ModelLoadState::kReady);
    }
    status.Publish(*s);
  }
  ~FakeWorker() { shm::Segment::Remove(name); }

  // The next submission (waits up to ten seconds).
  shm::DescriptorData Next(shm::DescriptorKind kind = shm::DescriptorKind::kSubmit) {
    shm::DescriptorData d{};
    for (int i = 0; i < 10000; ++i) {
      if (submissions.TryPop(&d) == shm::RingStatus::kOk && d.kind == static_cast<uint16_t>(kind)) {
        return d;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    FAIL("no descriptor from the hook host");
    return d;
  }

  // A completion for `d` whose output is `shape` at `offset` of this worker's partition.
  shm::DescriptorData Completion(const shm::DescriptorData& d, const Shape& shape,
                                 uint64_t offset = 0, uint32_t partition = UINT32_MAX) {
    shm::DescriptorData c{};
    c.kind = static_cast<uint16_t>(shm::DescriptorKind::kCompletion);
    c.slot = d.slot;
    c.generation = d.generation;
    c.sequence = d.sequence;
    c.model = d.model;
    c.rows = d.rows;
    c.sender_generation = segment.generation(slot).load();
    c.num_tensors = 1;
    uint64_t bytes = TensorByteSize(DType::kF32, shape).value();
    c.tensors[0] = shm::MakeTensorRef(partition == UINT32_MAX ? slot : partition, offset, bytes,
                                      DType::kF32, shape);
    return c;
  }
  uint64_t refused() const {
    return segment.ring_head(segment.CompletionRing(0, 0)).invalid_descriptors.load();
  }
};

InferRequest Mlp(const HookHost& host, const std::vector<uint8_t>& input) {
  InferRequest r;
  r.model = host.Find("mlp");
  r.inputs.push_back({"input", DType::kF32, {2, 784}, input});
  return r;
}

TEST_CASE("completions a worker forges are refused or fail only their request") {
  FakeWorker worker;
  shm::Segment view = shm::Segment::Attach(worker.name, 0).value();
  std::vector<HookModel> models = LoadHookModels(worker.repo).value();
  HookHost host(view, 0, models, HookHostOptions{});
  host.Start();
  std::vector<uint8_t> input(2 * 784 * 4);

  InferRequest traced = Mlp(host, input);
  traced.trace_id_high = 0x4bf92f3577b34da6ULL;  // A traceparent's id travels to the worker.
  traced.trace_id_low = 0xa3ce929d0e0e4736ULL;
  std::future<Result<InferResponse>> first = host.Submit(std::move(traced));
  shm::DescriptorData d = worker.Next();
  CHECK(d.model == kMlp);
  CHECK(d.rows == 2);
  CHECK(d.trace_id_high == 0x4bf92f3577b34da6ULL);
  CHECK(d.trace_id_low == 0xa3ce929d0e0e4736ULL);
  // Forged: an unknown request, memory past the worker's partition, the hook host's own
  // partition, a kind completions never carry. Each is refused and counted; the request waits.
  shm::DescriptorData unknown = worker.Completion(d, {2, 10});
  unknown.sequence += 1000;
  shm::DescriptorData outside = worker.Completion(d, {2, 10}, worker.segment.partition_bytes());
  shm::DescriptorData own = worker.Completion(d, {2, 10}, 0, 0);
  shm::DescriptorData kind = worker.Completion(d, {2, 10});
  kind.kind = static_cast<uint16_t>(shm::DescriptorKind::kSubmit);
  for (const shm::DescriptorData& forged : {unknown, outside, own, kind}) {
    REQUIRE(worker.completions.TryPush(forged) == shm::RingStatus::kOk);
  }
  for (int i = 0; i < 10000 && worker.refused() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(worker.refused() == 4);
  CHECK(first.wait_for(std::chrono::milliseconds(20)) == std::future_status::timeout);

  // In bounds but the wrong shape: the request fails INTERNAL, naming what was expected.
  REQUIRE(worker.completions.TryPush(worker.Completion(d, {2, 11})) == shm::RingStatus::kOk);
  Result<InferResponse> wrong = Get(first);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == ErrorCode::kInternal);
  CHECK(wrong.error().message == "model 'mlp': the worker's output 'logits' is not FP32 [2, 10]");
  // It is still released: the worker gets its block back.
  shm::DescriptorData release = worker.Next(shm::DescriptorKind::kRelease);
  CHECK(release.sequence == d.sequence);

  // A status no code has: INTERNAL; an error message is passed through.
  std::future<Result<InferResponse>> second = host.Submit(Mlp(host, input));
  shm::DescriptorData d2 = worker.Next();
  shm::DescriptorData bad_status = worker.Completion(d2, {2, 10});
  bad_status.status = 999;
  bad_status.num_tensors = 0;
  REQUIRE(worker.completions.TryPush(bad_status) == shm::RingStatus::kOk);
  Result<InferResponse> odd = Get(second);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.error().code == ErrorCode::kInternal);  // Not clamped to the last code.
  CHECK(odd.error().message == "the worker gave no reason");

  std::future<Result<InferResponse>> third = host.Submit(Mlp(host, input));
  shm::DescriptorData d3 = worker.Next();
  std::string text = "queue is full";
  std::memcpy(worker.segment.partition(worker.slot).data() + 4096, text.data(), text.size());
  shm::DescriptorData full = worker.Completion(d3, {1}, 4096);
  full.status = static_cast<uint32_t>(ErrorCode::kResourceExhausted) + 1;
  int64_t text_shape[] = {static_cast<int64_t>(text.size())};
  full.tensors[0] = shm::MakeTensorRef(worker.slot, 4096, text.size(), DType::kU8, text_shape);
  REQUIRE(worker.completions.TryPush(full) == shm::RingStatus::kOk);
  Result<InferResponse> refused = Get(third);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kResourceExhausted);
  CHECK(refused.error().message == "queue is full");

  // A well-formed answer is read from the worker's memory as it is.
  std::future<Result<InferResponse>> fourth = host.Submit(Mlp(host, input));
  shm::DescriptorData d4 = worker.Next();
  std::vector<float> logits(20);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i) * 0.5f;
  std::memcpy(worker.segment.partition(worker.slot).data() + 8192, logits.data(), 80);
  shm::DescriptorData good = worker.Completion(d4, {2, 10}, 8192);
  good.batch_size = 4;
  good.timing.queue_us = 7;
  good.timing.compute_us = 11;
  REQUIRE(worker.completions.TryPush(good) == shm::RingStatus::kOk);
  Result<InferResponse> ok = Get(fourth);
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(std::memcmp(ok->outputs[0].bytes.data(), logits.data(), 80) == 0);
  CHECK(ok->timings.batch_size == 4);
  CHECK(ok->timings.queue_ns == 7000);
  CHECK(ok->timings.compute_ns == 11000);
  CHECK(worker.refused() == 4);  // Nothing legitimate was counted.
}

}  // namespace
}  // namespace ferry::hookhost
