#include "worker/backends/cpu/affinity.h"

#include <doctest/doctest.h>

#include <set>

#include "worker/backends/cpu/cpu_backend.h"

namespace ferry {
namespace {

TEST_CASE("CPU shares partition the CPUs: disjoint, covering, sizes within one") {
  std::vector<int> cpus;
  for (int c = 0; c < 10; ++c) {
    cpus.push_back(c * 2);  // Non-contiguous ids, as in a restricted mask.
  }
  for (int workers = 1; workers <= 10; ++workers) {
    CAPTURE(workers);
    std::set<int> seen;
    size_t smallest = 100, largest = 0;
    for (int i = 0; i < workers; ++i) {
      std::vector<int> share = CpuShare(cpus, i, workers);
      smallest = std::min(smallest, share.size());
      largest = std::max(largest, share.size());
      for (int cpu : share) {
        CHECK(seen.insert(cpu).second);  // No CPU in two shares.
      }
    }
    CHECK(seen.size() == cpus.size());
    CHECK(largest - smallest <= 1);
    CHECK(smallest >= 1);
  }
}

TEST_CASE("with fewer CPUs than workers each worker gets one CPU, spread round robin") {
  std::vector<int> cpus = {3, 5};
  CHECK(CpuShare(cpus, 0, 3) == std::vector<int>{3});
  CHECK(CpuShare(cpus, 1, 3) == std::vector<int>{5});
  CHECK(CpuShare(cpus, 2, 3) == std::vector<int>{3});
}

TEST_CASE("pinning narrows the mask and the backend's default threads follow it") {
  std::vector<int> allowed = AllowedCpus();
  REQUIRE(!allowed.empty());
  CHECK(CpuThreads(0) == allowed.size());
  CHECK(CpuThreads(3) == 3u);
  REQUIRE(PinToCpus({allowed[0]}).ok());
  CHECK(AllowedCpus() == std::vector<int>{allowed[0]});
  CHECK(CpuThreads(0) == 1u);
  CHECK(CpuBackend().threads() == 1u);
  CHECK(!PinToCpus({}).ok());
  CHECK(!PinToCpus({-1}).ok());
  REQUIRE(PinToCpus(allowed).ok());
}

}  // namespace
}  // namespace ferry
