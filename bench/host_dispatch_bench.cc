// ferry-host-dispatch-bench [--json]: the CUDA backend's host work per dispatch with the CUDA
// calls stubbed (not made): ValidateJob, gathering every request's input rows into the staging
// buffer (padding zeroed) and scattering the outputs back (worker/backends/staging.h), for batches
// of 1, 8 and 32 one-row requests of the example MLP. What the real dispatch adds is one
// host-to-device copy per input, one graph launch, one device-to-host copy per output and one
// synchronisation (4 API calls for the MLP, ~3 us of launch on an H200 per
// ../shared/research/h200_probe.md), whatever the number of requests. Baseline in the same
// run: one memcpy of the same input and output bytes (the floor for moving them at all).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "model/bundle.h"
#include "model/shape_inference.h"
#include "worker/backends/staging.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

template <typename Fn>
double MedianNs(Fn fn, int iterations) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    fn();
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::nth_element(samples.begin(), samples.begin() + iterations / 2, samples.end());
  return samples[static_cast<size_t>(iterations / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-host-dispatch-bench: host work per CUDA dispatch, CUDA calls stubbed"};
  bool json = false;
  int iterations = 20000;
  app.add_flag("--json", json, "one JSON object");
  app.add_option("--iterations", iterations, "timed dispatches per point");
  CLI11_PARSE(app, argc, argv);
  Result<Bundle> bundle = LoadBundle("examples/models/mlp");
  if (!bundle.ok()) {
    std::cerr << bundle.error().message << " (run from the repository root)\n";
    return 1;
  }
  const Manifest& m = bundle->manifest;
  WeightLookup lookup = [&](const std::string& name) -> std::optional<WeightSpec> {
    const TensorInfo* info = bundle->weights.index().Find(name);
    return info ? std::optional<WeightSpec>(WeightSpec{info->dtype, info->shape}) : std::nullopt;
  };
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t n : {1, 8, 32}) {
    std::map<std::string, Shape> shapes = InferShapes(m, m.variants[0], n, lookup).value();
    StagingLayout layout = PlanStaging(m, shapes).value();
    std::vector<uint8_t> staging(layout.total_bytes);
    int64_t in_row = RowBytes(m, m.inputs[0], m.variants[0], true);
    int64_t out_row = RowBytes(m, m.outputs[0], m.variants[0], false);
    std::vector<uint8_t> inputs(static_cast<size_t>(n * in_row), 1);
    std::vector<uint8_t> outputs(static_cast<size_t>(n * out_row));
    BatchJob job{0, n, {}};
    for (int64_t r = 0; r < n; ++r) {
      job.requests.push_back({1,
                              {std::span<const uint8_t>(inputs).subspan(
                                  static_cast<size_t>(r * in_row), static_cast<size_t>(in_row))},
                              {std::span<uint8_t>(outputs).subspan(static_cast<size_t>(r * out_row),
                                                                   static_cast<size_t>(out_row))}});
    }
    double host = MedianNs(
        [&] {
          if (!ValidateJob(m, job).ok()) {
            std::abort();
          }
          GatherInput(layout, job, 0, staging);
          ScatterOutput(layout, job, 0, staging);
        },
        iterations);
    double floor = MedianNs(
        [&] {
          std::memcpy(staging.data(), inputs.data(), inputs.size());
          std::memcpy(outputs.data(), staging.data() + layout.outputs[0].offset, outputs.size());
          asm volatile("" : : "r"(staging.data()), "r"(outputs.data()) : "memory");
        },
        iterations);
    rows.push_back({{"requests", n},
                    {"host_us", host / 1e3},
                    {"memcpy_us", floor / 1e3},
                    {"ratio_to_memcpy", host / floor}});
    out["host_us_per_dispatch_" + std::to_string(n) + "x1"] = host / 1e3;
    if (!json) {
      std::printf(
          "%2ld one-row requests: host %.2f us per dispatch (memcpy floor %.2f us, %.2fx)\n",
          static_cast<long>(n), host / 1e3, floor / 1e3, host / floor);
    }
  }
  out["points"] = rows;
  out["target_us_32x1"] = 5.0;
  if (json) {
    std::cout << out.dump(2) << "\n";
  }
  return 0;
}
