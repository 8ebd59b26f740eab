// ValidateJob: every rule at its boundary, and no allocation on the valid path (it runs for
// every dispatch; messages are built only when a job is refused).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "worker/backend.h"

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
  CHECK(!ValidateJob(m, zero).ok());
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

}  // namespace
}  // namespace ferry
