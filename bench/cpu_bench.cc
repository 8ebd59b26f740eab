// ferry-cpu-bench: rows/s of CpuBackend on the example models (or one bundle), one request of
// `batch` rows per Execute (the rows a worker would coalesce), after a warm-up, for a fixed
// time.
//
//   ferry-cpu-bench [--threads 1,2] [--seconds 0.5] [--mode fast|reference] [--json]
//   ferry-cpu-bench --bundle DIR --batches 1,8 [--input X.raw ...] [--output Y.f32] ...
//
// With --input (once per model input, in manifest order), every execution reads those rows
// (raw little-endian values of the input's own type, `batch` rows each) and --output receives
// the first output of the last one. Without, FP32 inputs get seeded normal values and the
// others zeros.
// bench/cpu_vs_torch.py runs it beside PyTorch and bench/vs_onnxruntime.py beside
// onnxruntime, in the same run, and report the ratio.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "worker/backends/cpu/cpu_backend.h"

namespace {

using namespace ferry;

struct Point {
  const char* model;
  int64_t batch;
};

struct Io {
  std::vector<std::string> input_files;  // Empty: seeded values.
  std::string output_file;               // Empty: not written.
};

// Input `i`'s `batch` rows: from its file, else seeded normal values (FP32) or zeros.
std::vector<uint8_t> InputRows(const Manifest& m, size_t i, int64_t batch, const Io& io) {
  std::vector<uint8_t> bytes(
      static_cast<size_t>(batch * RowBytes(m, m.inputs[i], m.variants[0], true)));
  if (i < io.input_files.size()) {
    std::ifstream file(io.input_files[i], std::ios::binary);
    file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (file.gcount() != static_cast<std::streamsize>(bytes.size())) {
      std::cerr << io.input_files[i] << ": needs " << bytes.size() << " bytes\n";
      std::exit(1);
    }
  } else if (m.inputs[i].dtype == DType::kF32) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (size_t at = 0; at + 4 <= bytes.size(); at += 4) {
      float x = normal(rng);
      std::memcpy(bytes.data() + at, &x, 4);
    }
  }
  return bytes;
}

double RowsPerSecond(CpuBackend& backend, ModelHandle handle, const Bundle& bundle, int64_t batch,
                     double seconds, const Io& io) {
  const Manifest& m = bundle.manifest;
  int64_t out_row = RowBytes(m, m.outputs[0], m.variants[0], false);
  std::vector<std::vector<uint8_t>> inputs;
  RequestIo request{batch, {}, {}};
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    inputs.push_back(InputRows(m, i, batch, io));
  }
  for (const std::vector<uint8_t>& bytes : inputs) {
    request.inputs.emplace_back(bytes);
  }
  std::vector<uint8_t> output(static_cast<size_t>(batch * out_row));
  std::vector<std::vector<uint8_t>> others;  // Outputs after the first: computed, not kept.
  others.reserve(m.outputs.size());          // The spans below point into it.
  request.outputs.emplace_back(output);
  for (size_t o = 1; o < m.outputs.size(); ++o) {
    others.emplace_back(
        static_cast<size_t>(batch * RowBytes(m, m.outputs[o], m.variants[0], false)));
    request.outputs.emplace_back(others.back());
  }
  BatchJob job{0, batch, {request}};
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
  if (!io.output_file.empty()) {
    std::ofstream(io.output_file, std::ios::binary)
        .write(reinterpret_cast<const char*>(output.data()),
               static_cast<std::streamsize>(output.size()));
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
  std::string bundle_dir;
  std::vector<int64_t> batches = {1, 8};
  Io io;
  app.add_option("--bundle", bundle_dir, "one bundle instead of the examples");
  app.add_option("--batches", batches, "batch sizes (with --bundle)")->delimiter(',');
  app.add_option("--input", io.input_files,
                 "raw rows of each input, in manifest order (with --bundle, one batch)");
  app.add_option("--output", io.output_file, "write the first output of the last run");
  CLI11_PARSE(app, argc, argv);

  std::vector<Point> points = {{"mlp", 1}, {"mlp", 8}, {"mlp", 32}, {"cnn", 1}, {"cnn", 16}};
  std::vector<std::string> names = {"mlp", "cnn"};
  std::string root = "examples/models/";
  if (!bundle_dir.empty()) {
    root.clear();
    names = {bundle_dir};
    points.clear();
    for (int64_t b : batches) {
      points.push_back({bundle_dir.c_str(), b});
    }
  }
  nlohmann::json results = nlohmann::json::array();
  std::map<std::string, Bundle> bundles;
  for (const std::string& name : names) {
    Result<Bundle> b = LoadBundle(root + name);
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
      double rate =
          RowsPerSecond(backend, handles[p.model], bundles.at(p.model), p.batch, seconds, io);
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
