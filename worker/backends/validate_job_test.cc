// ValidateJob: every rule at its boundary, and no allocation on the valid path (it runs for
// every dispatch; messages are built only when a job is refused).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "worker/backends/backend.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// Counting replacements of the global allocation functions, malloc-backed on both sides.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace ferry {
namespace {

Manifest Mlp() {
  Manifest m;
  m.name = "m";
  m.inputs = {{"x", DType::kF32, {kBatchDim, 4}, 0}};
  m.outputs = {{"y", DType::kF32, {kBatchDim, 2}, 0}};
  m.batch_sizes = {1, 8, 32};
  m.variants = {{"default", {{"x", {kBatchDim, 4}}}, {{"y", {kBatchDim, 2}}}}};
  return m;
}

TEST_CASE("a valid job of 32 one-row requests is checked without allocating") {
  Manifest m = Mlp();
  std::vector<uint8_t> in(32 * 16), out(32 * 8);
  BatchJob job{0, 32, {}};
  for (int r = 0; r < 32; ++r) {
    job.requests.push_back({1,
                            {std::span<const uint8_t>(in).subspan(r * 16, 16)},
                            {std::span<uint8_t>(out).subspan(r * 8, 8)}});
  }
  long before = g_allocations.load();
  Status s = ValidateJob(m, job);
  long after = g_allocations.load();
  CHECK(s.ok());
  CHECK(after - before == 0);
}

TEST_CASE("ValidateJob boundaries: rows, sizes, counts and byte sizes") {
  Manifest m = Mlp();
  std::vector<uint8_t> in(64 * 16), out(64 * 8);
  auto job = [&](int64_t size, std::vector<int64_t> rows) {
    BatchJob j{0, size, {}};
    size_t at = 0;
    for (int64_t r : rows) {
      j.requests.push_back({r,
                            {std::span<const uint8_t>(in).subspan(at * 16, r * 16)},
                            {std::span<uint8_t>(out).subspan(at * 8, r * 8)}});
      at += static_cast<size_t>(r);
    }
    return j;
  };
  CHECK(ValidateJob(m, job(8, {8})).ok());      // Exactly full.
  CHECK(!ValidateJob(m, job(8, {8, 1})).ok());  // One row over.
  CHECK(!ValidateJob(m, job(8, {9})).ok());     // A request larger than the size.
  CHECK(!ValidateJob(m, job(4, {1})).ok());     // Not a compiled size.
  CHECK(!ValidateJob(m, job(8, {})).ok());      // Empty.
  BatchJob zero = job(8, {1});
  zero.requests[0].rows = 0;
  // Refused by the row rule itself, not only later by the byte sizes a zero-row request has.
  CHECK(ValidateJob(m, zero).error().message.find("rows must be in [1, 8], got 0") !=
        std::string::npos);
  zero.requests[0].inputs[0] = std::span<const uint8_t>(in).first(0);
  zero.requests[0].outputs[0] = std::span<uint8_t>(out).first(0);
  CHECK(ValidateJob(m, zero).error().message.find("rows must be in [1, 8], got 0") !=
        std::string::npos);
  BatchJob small_out = job(8, {2});
  small_out.requests[0].outputs[0] = std::span<uint8_t>(out).first(15);  // 16 needed.
  CHECK(ValidateJob(m, small_out).error().message.find("has room for 15 bytes, expected 16") !=
        std::string::npos);
  BatchJob extra = job(8, {1});
  extra.requests[0].inputs.push_back(extra.requests[0].inputs[0]);
  CHECK(!ValidateJob(m, extra).ok());
  BatchJob variant = job(8, {1});
  variant.variant = 1;
  CHECK(!ValidateJob(m, variant).ok());
  // A second request that is wrong is caught too, not only the first.
  BatchJob second = job(8, {1, 1});
  second.requests[1].inputs[0] = std::span<const uint8_t>(in).first(17);
  CHECK(ValidateJob(m, second).error().message.find("request 1") != std::string::npos);
}

TEST_CASE("ValidateJob: every count and size is checked both ways") {
  Manifest m = Mlp();
  std::vector<uint8_t> in(64), out(64);
  auto one = [&] {
    return BatchJob{
        0, 1, {{1, {std::span<const uint8_t>(in).first(16)}, {std::span<uint8_t>(out).first(8)}}}};
  };
  REQUIRE(ValidateJob(m, one()).ok());
  BatchJob fewer = one();
  fewer.requests[0].inputs.clear();  // Fewer inputs than the manifest: never indexed past.
  CHECK(ValidateJob(m, fewer).error().message.find("expected 1 inputs and 1 outputs") !=
        std::string::npos);
  BatchJob no_output = one();
  no_output.requests[0].outputs.clear();
  CHECK_FALSE(ValidateJob(m, no_output).ok());
  BatchJob big_in = one();
  big_in.requests[0].inputs[0] = std::span<const uint8_t>(in).first(17);
  CHECK(ValidateJob(m, big_in).error().message ==
        "model 'm': request 0: input 'x' has 17 bytes, expected 16");
  BatchJob big_out = one();
  big_out.requests[0].outputs[0] = std::span<uint8_t>(out).first(9);
  CHECK(ValidateJob(m, big_out).error().message ==
        "model 'm': request 0: output 'y' has room for 9 bytes, expected 8");
  BatchJob negative = one();
  negative.variant = -1;
  CHECK(ValidateJob(m, negative).error().message == "model 'm': no shape variant -1");
}

TEST_CASE("ValidateJob: one-byte tensors pass, zero-byte and overflowing ones never match") {
  Manifest m;
  m.name = "bytes";
  m.inputs = {{"x", DType::kU8, {kBatchDim, 1}, 0}};
  m.outputs = {{"y", DType::kU8, {kBatchDim, 1}, 0}};
  m.batch_sizes = {1};
  m.variants = {{"default", {{"x", {kBatchDim, 1}}}, {{"y", {kBatchDim, 1}}}}};
  std::vector<uint8_t> in(1), out(1);
  BatchJob job{0, 1, {{1, {std::span<const uint8_t>(in)}, {std::span<uint8_t>(out)}}}};
  CHECK(ValidateJob(m, job).ok());  // The smallest tensors there are.

  Manifest empty = m;  // A zero-width input: no span can be right.
  empty.variants[0].inputs["x"] = {kBatchDim, 0};
  BatchJob no_bytes{0, 1, {{1, {std::span<const uint8_t>()}, {std::span<uint8_t>(out)}}}};
  CHECK_FALSE(ValidateJob(empty, no_bytes).ok());
  Manifest empty_out = m;
  empty_out.variants[0].outputs["y"] = {kBatchDim, 0};
  BatchJob no_room{0, 1, {{1, {std::span<const uint8_t>(in)}, {std::span<uint8_t>()}}}};
  CHECK_FALSE(ValidateJob(empty_out, no_room).ok());

  Manifest huge = m;  // Row bytes overflow int64: reported as -1, matched by nothing.
  huge.variants[0].inputs["x"] = {kBatchDim, int64_t{1} << 62, 4};
  CHECK(RowBytes(huge, huge.inputs[0], huge.variants[0], true) == -1);
  CHECK(RequestBytes(huge, huge.inputs[0], huge.variants[0], true, 1) == -1);
  CHECK_FALSE(ValidateJob(huge, job).ok());
  CHECK(RowBytes(m, m.inputs[0], m.variants[0], true) == 1);
}

// A backend that only implements the synchronous Execute: Begin / Finish come from Backend.
class SyncOnly : public Backend {
 public:
  std::string_view name() const override { return "sync"; }
  Result<ModelHandle> Load(const Bundle&) override { return 0; }
  Result<ExecutionTiming> Execute(ModelHandle, const BatchJob&) override {
    ExecutionTiming t;
    t.compute_seconds = 0.5;
    t.started_ns = reported_start;
    t.finished_ns = reported_end;
    return t;
  }
  Status ModelStatus(ModelHandle) const override { return OkStatus(); }
  int64_t reported_start = 0;
  int64_t reported_end = 0;
};

TEST_CASE("the default Begin/Finish stamp the times a synchronous backend did not report") {
  SyncOnly backend;
  BatchJob job{0, 1, {}};
  REQUIRE(backend.Begin(0, job).ok());
  Result<ExecutionTiming> t = backend.Finish();
  REQUIRE(t.ok());
  CHECK(t->compute_seconds == 0.5);
  CHECK(t->started_ns > 0);
  CHECK(t->finished_ns >= t->started_ns);
  // Times the backend reported itself are kept as they are.
  backend.reported_start = 5;
  backend.reported_end = 7;
  REQUIRE(backend.Begin(0, job).ok());
  t = backend.Finish();
  REQUIRE(t.ok());
  CHECK(t->started_ns == 5);
  CHECK(t->finished_ns == 7);
}

}  // namespace
}  // namespace ferry
