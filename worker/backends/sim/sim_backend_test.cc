#include "worker/backends/sim/sim_backend.h"

#include <doctest/doctest.h>

#include <algorithm>

namespace ferry {
namespace {

TEST_CASE("the sim backend spends its cost model's time per compiled size and zeroes outputs") {
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  std::vector<double> spent;
  SimCost mlp_cost{0.001, 0.0001, {{32, 0.5}}};
  SimBackend backend({{"mlp", mlp_cost}}, {}, [&](double s) { spent.push_back(s); });
  ModelHandle mlp = backend.Load(bundle).value();
  std::vector<uint8_t> input(784 * 4 * 2), output(10 * 4 * 2, 0xff);
  REQUIRE(backend.Execute(mlp, BatchJob{0, 4, {{2, {input}, {output}}}}).ok());
  REQUIRE(backend.Execute(mlp, BatchJob{0, 32, {{2, {input}, {output}}}}).ok());
  REQUIRE(spent.size() == 2);
  CHECK(spent[0] == doctest::Approx(0.001 + 4 * 0.0001));
  CHECK(spent[1] == 0.5);  // The table overrides the line.
  CHECK(std::all_of(output.begin(), output.end(), [](uint8_t b) { return b == 0; }));
  // Jobs are checked as on a real backend.
  CHECK(backend.Execute(mlp, BatchJob{0, 3, {{2, {input}, {output}}}}).error().code ==
        ErrorCode::kInvalidArgument);
  CHECK(backend.ModelStatus(5).error().code == ErrorCode::kNotFound);
}

TEST_CASE("by default the sim backend really spends the time, and reports it as compute") {
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  SimBackend backend({}, SimCost{0.002, 0, {}});
  ModelHandle mlp = backend.Load(bundle).value();
  std::vector<uint8_t> input(784 * 4), output(10 * 4);
  Result<ExecutionTiming> timing = backend.Execute(mlp, BatchJob{0, 1, {{1, {input}, {output}}}});
  REQUIRE(timing.ok());
  CHECK(timing->compute_seconds >= 0.002);  // sleep_for never returns early.
  CHECK(timing->load_seconds == 0);
}

}  // namespace
}  // namespace ferry
