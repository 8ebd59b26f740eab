// The logging extension's endpoint: Triton's keys merged and refused by type and value, and a
// change written for ferryd with a sequence that continues a restarted host's.
#include "hookhost/frontend/log_endpoint.h"

#include <doctest/doctest.h>

#include "tests/testing/shm_name.h"

namespace ferry::frontend {
namespace {

using nlohmann::json;

TEST_CASE("settings merge Triton's keys and refuse everything else, naming the key") {
  LogSettings base;
  Result<LogSettings> merged = MergeLogSettings(base, json{{"log_verbose_level", 2},
                                                           {"log_format", "ISO8601"},
                                                           {"log_info", false},
                                                           {"log_file", ""}});
  REQUIRE(merged.ok());
  CHECK(merged->verbose_level == 2);
  CHECK(merged->iso8601);
  CHECK_FALSE(merged->info);
  CHECK(merged->warning);
  CHECK(LogSettingsJson(*merged) == json{{"log_file", ""},
                                         {"log_info", false},
                                         {"log_warning", true},
                                         {"log_error", true},
                                         {"log_verbose_level", 2},
                                         {"log_format", "ISO8601"}});
  for (const auto& one_case : std::vector<std::pair<json, std::string>>{
           {json{{"log_verbose_level", -1}}, "log_verbose_level"},
           {json{{"log_verbose_level", 256}}, "log_verbose_level"},
           {json{{"log_verbose_level", 1.5}}, "log_verbose_level"},
           {json{{"log_verbose_level", UINT64_MAX}}, "log_verbose_level"},
           {json{{"log_verbose_level", "2"}}, "log_verbose_level"},
           {json{{"log_info", "true"}}, "log_info"},
           {json{{"log_error", nullptr}}, "log_error"},
           {json{{"log_format", "json"}}, "log_format"},
           {json{{"log_file", "/var/log/x"}}, "log_file"},
           {json{{"log_file", 0}}, "log_file"},
           {json{{std::string(10000, 'k'), true}}, "is not a log setting"},
           {json::array({1, 2}), "JSON object"},
           {json("log_info"), "JSON object"}}) {
    // Named, not structured bindings: CHECK's lambda takes them.
    const json& bad = one_case.first;
    const std::string& named = one_case.second;
    CAPTURE(bad.dump().substr(0, 80));
    Result<LogSettings> r = MergeLogSettings(base, bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
    CHECK(r.error().message.find(named) != std::string::npos);
    CHECK(r.error().message.size() < 400);  // A huge key is not echoed whole.
  }
}

TEST_CASE("a change is asked of ferryd with a sequence a restarted host continues") {
  std::string name = testing::UniqueShmName("logging");
  shm::Segment supervisor = shm::Segment::Create(name, {2, 1, 64, uint64_t{16} << 20}).value();
  {
    shm::Segment host = shm::Segment::Attach(name, 1).value();
    LogEndpoint endpoint(host);
    CHECK(endpoint.Current() == CurrentLogSettings());  // Nothing set for the node yet.
    Result<LogSettings> set = endpoint.Update(json{{"log_verbose_level", 1}});
    REQUIRE(set.ok());
    uint64_t request = supervisor.frontend_counters(1).log_request.load();
    CHECK((request >> 32) == 1);
    LogSettings asked;
    REQUIRE(LogSettings::Decode(static_cast<int32_t>(static_cast<uint32_t>(request)), &asked));
    CHECK(asked.verbose_level == 1);
    // A refused change asks nothing.
    CHECK_FALSE(endpoint.Update(json{{"log_info", 3}}).ok());
    CHECK(supervisor.frontend_counters(1).log_request.load() == request);
    // This host answers what it took at once (others, once ferryd sends it).
    CHECK(endpoint.Current().verbose_level == 1);
  }
  shm::Segment restarted = shm::Segment::Attach(name, 1).value();
  LogEndpoint again(restarted);
  REQUIRE(again.Update(json{{"log_verbose_level", 0}}).ok());
  CHECK((supervisor.frontend_counters(1).log_request.load() >> 32) == 2);
  ApplyLogSettings(LogSettings{});
  shm::Segment::Remove(name);
}

}  // namespace
}  // namespace ferry::frontend
