// The trace extension on a hook host: Triton's settings merged and refused by key; a change
// applied here at once and asked of ferryd; sampling by rate and count; a sampled request's
// span carries the client's trace id and parent, or ids of its own.
#include "hookhost/frontend/trace_endpoint.h"

#include <doctest/doctest.h>

#include "tests/testing/shm_name.h"

namespace ferry::frontend {
namespace {

using nlohmann::json;

TEST_CASE("trace settings merge Triton's keys and refuse anything else by name") {
  TraceSettings base;
  Result<TraceSettings> on = MergeTraceSettings(
      base, {{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", "2"}, {"trace_count", "5"}});
  REQUIRE(on.ok());
  CHECK(on->timestamps);
  CHECK(on->rate == 2);
  CHECK(on->count == 5);
  Result<TraceSettings> reset = MergeTraceSettings(*on, {{"trace_rate", nullptr}});
  REQUIRE(reset.ok());
  CHECK(reset->rate == 1000);
  CHECK(MergeTraceSettings(base, {{"trace_file", ""}, {"log_frequency", "0"}}).ok());
  struct Case {
    json changes;
    const char* named;
  };
  for (const Case& c : std::vector<Case>{{{{"trace_level", {"TENSORS"}}}, "trace_level"},
                                         {{{"trace_level", {"OFF", "TIMESTAMPS"}}}, "trace_level"},
                                         {{{"trace_rate", "0"}}, "trace_rate"},
                                         {{{"trace_rate", "16777216"}}, "trace_rate"},
                                         {{{"trace_rate", "1e3"}}, "trace_rate"},
                                         {{{"trace_rate", 5}}, "trace_rate"},
                                         {{{"trace_count", "-2"}}, "trace_count"},
                                         {{{"trace_count", "99999999999999999999"}}, "trace_count"},
                                         {{{"trace_file", "/etc/passwd"}}, "trace_file"},
                                         {{{"log_frequency", "10"}}, "log_frequency"},
                                         {{{"trace_mode", "triton"}}, "trace_mode"},
                                         {{{"trace_config", "x"}}, "trace_config"},
                                         {json::array(), "object"}}) {
    Result<TraceSettings> merged = MergeTraceSettings(base, c.changes);
    CAPTURE(c.changes.dump());
    REQUIRE(!merged.ok());
    CHECK(merged.error().code == ErrorCode::kInvalidArgument);
    CHECK(merged.error().message.find(c.named) != std::string::npos);
  }
}

struct Store {
  std::string segment = testing::UniqueShmName("trace");
  shm::TraceStore store = shm::TraceStore::Create(segment, 0).value();
  ~Store() { shm::TraceStore::Remove(segment, 0); }
};

TEST_CASE("a change applies here at once and is asked of ferryd") {
  Store s;
  TraceEndpoint endpoint(&s.store);
  CHECK(!endpoint.Current().timestamps);  // No settings published yet.
  s.store.area().settings.store(TraceSettings{true, 1, -1}.Encode(1));
  CHECK(endpoint.Sample());
  CHECK(endpoint.Sample());  // Two sampled before the change: its trace_count counts from it.
  Result<TraceSettings> updated =
      endpoint.Update({{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", "3"}});
  REQUIRE(updated.ok());
  CHECK(endpoint.Current().timestamps);
  CHECK(endpoint.Current().rate == 3);
  CHECK(s.store.area().asked.load() == 1);
  CHECK(s.store.area().asked_sampled.load() == 2);
  TraceSettings asked;
  REQUIRE(TraceSettings::Decode(s.store.area().asked_word.load(), &asked));
  CHECK(asked == *updated);
  // ferryd's word, older than the change, does not undo it until ferryd has taken it.
  s.store.area().settings.store(TraceSettings{false, 9, -1}.Encode(5));
  CHECK(endpoint.Current().rate == 3);
  s.store.area().asked_taken.store(1);
  CHECK(endpoint.Current().rate == 9);
  s.store.area().settings.store(updated->Encode(6));
  CHECK(!endpoint.Update({{"trace_rate", "x"}}).ok());
  CHECK(endpoint.Current().rate == 3);  // A refused change changes nothing.
  CHECK(s.store.area().asked.load() == 1);
  TraceEndpoint none(nullptr);
  CHECK(none.Update({{"trace_rate", "1"}}).error().code == ErrorCode::kUnavailable);
  CHECK(!none.Sample());
}

TEST_CASE("sampling: one request of every trace_rate, at most trace_count") {
  Store s;
  TraceEndpoint endpoint(&s.store);
  CHECK(!endpoint.Sample());  // Off.
  s.store.area().settings.store(TraceSettings{true, 4, -1}.Encode(1));
  int sampled = 0;
  for (int i = 0; i < 400; ++i) {
    sampled += endpoint.Sample() ? 1 : 0;
  }
  CHECK(sampled == 100);
  s.store.area().sampled_base.store(s.store.area().sampled.load());  // As ferryd publishes.
  s.store.area().settings.store(TraceSettings{true, 1, 7}.Encode(2));
  sampled = 0;
  for (int i = 0; i < 100; ++i) {
    sampled += endpoint.Sample() ? 1 : 0;
  }
  CHECK(sampled == 7);
  CHECK(s.store.area().sampled.load() == 107);
  // ferryd counted them and republished what is left (2): this host may sample 2 more.
  s.store.area().sampled_base.store(107);
  s.store.area().settings.store(TraceSettings{true, 1, 2}.Encode(3));
  CHECK(endpoint.Sample());
  CHECK(endpoint.Sample());
  CHECK(!endpoint.Sample());
}

TEST_CASE("a sampled request's span: the client's trace id and parent, or its own") {
  Store s;
  TraceEndpoint endpoint(&s.store);
  hookhost::RequestTimings t;
  t.validate_ns = 10;
  t.queue_ns = 300;
  t.compute_ns = 500;
  t.total_ns = 1000;
  endpoint.Record("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 3, t, 0);
  endpoint.Record("", 4, t, 5);
  std::vector<shm::TraceSpanData> spans = s.store.Take();
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].trace_hi == 0x0af7651916cd43ddull);
  CHECK(spans[0].trace_lo == 0x8448eb211c80319cull);
  CHECK(spans[0].parent_span == 0xb7ad6b7169203331ull);
  CHECK(spans[0].span != 0);
  CHECK(spans[0].model == 3);
  CHECK(spans[0].queue_ns == 300);
  CHECK(spans[0].total_ns == 1000);
  CHECK(spans[0].start_unix_ns > 1'700'000'000'000'000'000);
  CHECK((spans[1].trace_hi | spans[1].trace_lo) != 0);  // An id of its own.
  CHECK(spans[1].parent_span == 0);
  CHECK(spans[1].code == 5);
  CHECK(spans[1].span != spans[0].span);
}

}  // namespace
}  // namespace ferry::frontend
