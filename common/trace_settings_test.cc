// Trace settings in one word: every setting round-trips with its change's sequence; words a
// hostile writer could leave (none, stray bits, a rate of 0) decode as no settings.
#include "common/trace_settings.h"

#include <doctest/doctest.h>

#include <initializer_list>

namespace ferry {
namespace {

TEST_CASE("trace settings round-trip through their word") {
  for (TraceSettings s : {TraceSettings{}, TraceSettings{true, 1, 0}, TraceSettings{true, 7, 5},
                          TraceSettings{false, TraceSettings::kMaxRate, TraceSettings::kMaxCount},
                          TraceSettings{true, 1000, -1}}) {
    TraceSettings back;
    uint32_t sequence = 0;
    REQUIRE(TraceSettings::Decode(s.Encode(1023), &back, &sequence));
    CHECK(back == s);
    CHECK(sequence == 1023);
  }
}

TEST_CASE("a word that holds no settings is refused") {
  TraceSettings s;
  CHECK(!TraceSettings::Decode(0, &s));
  CHECK(!TraceSettings::Decode(TraceSettings{}.Encode() & ~(uint64_t{1} << 62), &s));
  CHECK(!TraceSettings::Decode(TraceSettings{}.Encode() | uint64_t{1} << 63, &s));
  CHECK(!TraceSettings::Decode(uint64_t{1} << 62, &s));  // A rate of 0.
  CHECK(!TraceSettings::Decode(~uint64_t{0}, &s));
}

}  // namespace
}  // namespace ferry
