// Tenant limits on a real segment of two hook hosts, the test playing ferryd (it copies the
// counts when a step says so) and the clock: max_queued exact on one host and bounded by one
// copy's worth across two, the rate bucket shared by both hosts, refusals naming the limit
// with a retry hint, and scribbled counts kept to their bounds.
#include "hookhost/tenant_limits.h"

#include <doctest/doctest.h>

#include "common/result.h"
#include "shm/tenant_counts.h"
#include "tests/testing/shm_name.h"

namespace ferry::hookhost {
namespace {

constexpr int64_t kMs = 1'000'000;

struct Node {
  std::string name = testing::UniqueShmName("limits");
  shm::Segment segment = shm::Segment::Create(name, {2, 1, 64, uint64_t{16} << 20}).value();
  ~Node() { shm::Segment::Remove(name); }
};

std::vector<TenantLimit> Limits(uint64_t max_queued, double rate, double burst) {
  std::vector<TenantLimit> limits(2);
  limits[1] = {"acme", max_queued, rate, burst};
  return limits;
}

TEST_CASE("max_queued is exact on one hook host and counts until released") {
  Node node;
  TenantLimiter host(node.segment, 0, Limits(3, 0, 0));
  for (int i = 0; i < 3; ++i) {
    CHECK(host.Admit(1, 0).ok());
  }
  Status refused = host.Admit(1, 0);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kResourceExhausted);
  CHECK(refused.error().message ==
        "tenant 'acme' has 3 requests in flight, its max_queued; retry after 100 ms");
  CHECK(RetryAfterMs(refused.error().message) == 100);
  host.Release(1);
  CHECK(host.NodeInFlight(1) == 2);
  CHECK(host.Admit(1, 0).ok());
  // The anonymous tenant is counted, never limited.
  for (int i = 0; i < 10; ++i) {
    CHECK(host.Admit(0, 0).ok());
  }
  CHECK(host.NodeInFlight(0) == 10);
}

TEST_CASE("across two hook hosts max_queued is passed by at most one copy's admissions") {
  Node node;
  TenantLimiter a(node.segment, 0, Limits(4, 0, 0));
  TenantLimiter b(node.segment, 1, Limits(4, 0, 0));
  CHECK(a.Admit(1, 0).ok());
  CHECK(a.Admit(1, 0).ok());
  // b has not seen a's two yet: it admits up to the limit by its own count.
  int admitted_by_b = 0;
  while (b.Admit(1, 0).ok()) {
    ++admitted_by_b;
  }
  CHECK(admitted_by_b == 4);  // 6 in flight: the limit passed by a's 2 since the last copy.
  shm::CopyTenantCounts(node.segment);
  CHECK(a.NodeInFlight(1) == 6);
  CHECK(b.NodeInFlight(1) == 6);
  CHECK_FALSE(a.Admit(1, 0).ok());
  CHECK_FALSE(b.Admit(1, 0).ok());
  for (int i = 0; i < 3; ++i) {
    b.Release(1);
  }
  shm::CopyTenantCounts(node.segment);
  CHECK(a.NodeInFlight(1) == 3);
  CHECK(a.Admit(1, 0).ok());
  CHECK_FALSE(a.Admit(1, 0).ok());  // 4 again.
}

TEST_CASE("a restarted hook host's limiter forgets its predecessor's requests") {
  Node node;
  {
    TenantLimiter dead(node.segment, 0, Limits(2, 0, 0));
    CHECK(dead.Admit(1, 0).ok());
    CHECK(dead.Admit(1, 0).ok());
  }
  TenantLimiter restarted(node.segment, 0, Limits(2, 0, 0));
  CHECK(restarted.NodeInFlight(1) == 0);
  CHECK(restarted.Admit(1, 0).ok());
}

TEST_CASE("the rate bucket refills at rate up to burst and hints the wait") {
  Node node;
  TenantLimiter host(node.segment, 0, Limits(0, 10, 5));
  for (int i = 0; i < 5; ++i) {
    CHECK(host.Admit(1, 1000 * kMs).ok());
  }
  Status refused = host.Admit(1, 1000 * kMs);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kResourceExhausted);
  CHECK(RetryAfterMs(refused.error().message) == 100);  // One token at 10/s.
  CHECK_FALSE(host.Admit(1, 1050 * kMs).ok());
  CHECK(RetryAfterMs(host.Admit(1, 1060 * kMs).error().message) == 40);
  CHECK(host.Admit(1, 1100 * kMs).ok());
  CHECK_FALSE(host.Admit(1, 1100 * kMs).ok());
  // A long pause refills to the burst, no more.
  int admitted = 0;
  while (host.Admit(1, 60'000 * kMs).ok()) {
    ++admitted;
  }
  CHECK(admitted == 5);
}

TEST_CASE("both hook hosts drain one bucket: a tenant gets its rate, not twice it") {
  Node node;
  TenantLimiter a(node.segment, 0, Limits(0, 100, 10));
  TenantLimiter b(node.segment, 1, Limits(0, 100, 10));
  int64_t now = 1000 * kMs;
  int admitted = 0;
  // Ten seconds in 10 ms steps, the load split over both hosts, ferryd copying every 20 ms.
  for (int step = 0; step < 1000; ++step, now += 10 * kMs) {
    for (int i = 0; i < 3; ++i) {
      admitted += a.Admit(1, now).ok() ? 1 : 0;
      admitted += b.Admit(1, now).ok() ? 1 : 0;
    }
    if (step % 2 == 1) {
      shm::CopyTenantCounts(node.segment);
    }
  }
  // 100/s for 10 s plus the bursts, and what the other host admitted within one copy.
  CHECK(admitted >= 1000);
  CHECK(admitted <= 1000 + 2 * 10 + 2 * 100 * 20 / 1000 + 10);
  // Separate buckets would have admitted about twice as many.
}

TEST_CASE("a client on one hook host gets the tenant's whole rate") {
  Node node;
  TenantLimiter a(node.segment, 0, Limits(0, 100, 10));
  TenantLimiter b(node.segment, 1, Limits(0, 100, 10));
  int64_t now = 1000 * kMs;
  int admitted = 0;
  for (int step = 0; step < 1000; ++step, now += 10 * kMs) {
    for (int i = 0; i < 3; ++i) {
      admitted += a.Admit(1, now).ok() ? 1 : 0;
    }
    shm::CopyTenantCounts(node.segment);
  }
  CHECK(admitted >= 1000);
  CHECK(admitted <= 1010);
}

TEST_CASE("scribbled counts stay within their bounds") {
  Node node;
  TenantLimiter a(node.segment, 0, Limits(8, 10, 5));
  // Hook host 1 claims absurd counts; ferryd clamps in flight and debt stays one burst.
  shm::FrontEndCountersData& other = node.segment.frontend_counters(node.segment.HookhostSlot(1));
  other.tenant_in_flight[1].store(UINT64_MAX);
  other.tenant_admitted[1].store(UINT64_MAX / 2);
  shm::CopyTenantCounts(node.segment);
  CHECK(a.NodeInFlight(1) == shm::kMaxSeenInFlight);
  CHECK_FALSE(a.Admit(1, 1000 * kMs).ok());
  other.tenant_in_flight[1].store(0);
  shm::CopyTenantCounts(node.segment);
  // The debt is one burst (5 tokens): at 10/s a token is back 0.6 s later.
  CHECK_FALSE(a.Admit(1, 1400 * kMs).ok());
  CHECK(a.Admit(1, 1000 * kMs + 1600 * kMs).ok());
}

}  // namespace
}  // namespace ferry::hookhost
