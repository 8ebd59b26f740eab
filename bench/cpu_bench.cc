// ferry-cpu-bench: rows/s of CpuBackend on the example models, one request of `batch` rows
// per Execute (the rows a worker would coalesce), after a warm-up, for a fixed time.
//
//   ferry-cpu-bench [--threads 1,2] [--seconds 0.5] [--mode fast|reference] [--json]
//
// bench/cpu_vs_torch.py runs it beside PyTorch in the same run and reports the ratio.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "worker/cpu/cpu_backend.h"

namespace {

using namespace ferry;

struct Point {
  const char* model;
  int64_t batch;
};

double RowsPerSecond(CpuBackend& backend, ModelHandle handle, const Bundle& bundle, int64_t batch,
                     double seconds) {
  const Manifest& m = bundle.manifest;
  int64_t in_row = RowBytes(m, m.inputs[0], m.variants[0], true);
  int64_t out_row = RowBytes(m, m.outputs[0], m.variants[0], false);
  std::vector<float> input(static_cast<size_t>(batch * in_row / 4));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& x : input) {
    x = normal(rng);
  }
  std::vector<uint8_t> output(static_cast<size_t>(batch * out_row));
  BatchJob job{
      0,
      batch,
      {{batch,
        {std::span<const uint8_t>(reinterpret_cast<uint8_t*>(input.data()), input.size() * 4)},
        {output}}}};
  auto run = [&] {
    Result<ExecutionTiming> r = backend.Execute(handle, job);
    if (!r.ok()) {
      std::cerr << r.error().message << "\n";
      std::exit(1);
    }
  };
  auto clock = [] { return std::chrono::steady_clock::now(); };
  for (auto until = clock() + std::chrono::duration<double>(seconds / 5); clock() < until;) {
    run();  // Warm-up: JIT, caches, OpenMP team.
  }
  int64_t iterations = 0;
  auto begin = clock();
  double elapsed = 0;
  while (elapsed < seconds) {
    run();
    ++iterations;
    elapsed = std::chrono::duration<double>(clock() - begin).count();
  }
  return static_cast<double>(iterations * batch) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-cpu-bench: CpuBackend rows/s on the example models"};
  std::vector<unsigned> threads = {1, 2};
  double seconds = 0.5;
  std::string mode = "fast";
  bool json = false;
  app.add_option("--threads", threads, "intra-op thread counts")->delimiter(',');
  app.add_option("--seconds", seconds, "measuring time per point");
  app.add_option("--mode", mode, "fast or reference")->check(CLI::IsMember({"fast", "reference"}));
  app.add_flag("--json", json, "one JSON object");
  CLI11_PARSE(app, argc, argv);

  const Point points[] = {{"mlp", 1}, {"mlp", 8}, {"mlp", 32}, {"cnn", 1}, {"cnn", 16}};
  nlohmann::json results = nlohmann::json::array();
  std::map<std::string, Bundle> bundles;
  for (const char* name : {"mlp", "cnn"}) {
    Result<Bundle> b = LoadBundle(std::string("examples/models/") + name);
    if (!b.ok()) {
      std::cerr << b.error().message << " (run from the repository root)\n";
      return 1;
    }
    bundles.emplace(name, std::move(*b));
  }
  for (unsigned t : threads) {
    CpuBackend backend(CpuOptions{mode == "fast" ? CpuMode::kFast : CpuMode::kReference, t});
    std::map<std::string, ModelHandle> handles;
    for (auto& [name, bundle] : bundles) {
      handles[name] = backend.Load(bundle).value();
    }
    for (const Point& p : points) {
      double rate = RowsPerSecond(backend, handles[p.model], bundles.at(p.model), p.batch, seconds);
      results.push_back(
          {{"model", p.model}, {"batch", p.batch}, {"threads", t}, {"ferry_rows_per_s", rate}});
      if (!json) {
        std::printf("%-4s batch %3ld threads %u  %10.0f rows/s\n", p.model,
                    static_cast<long>(p.batch), t, rate);
      }
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"mode", mode}, {"results", results}}.dump(2) << "\n";
  }
  return 0;
}
