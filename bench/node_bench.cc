// ferry-node-bench [--json] [--seconds S] [--check]: one ferry-worker process driven over the
// real shared-memory rings by this process acting as a hook host, in one run:
//   sim:   SimBackend at saturation, four models with different cost lines, one-row requests.
//          ratio_to_ideal = GPU-busy seconds by the cost model / wall seconds, i.e. served
//          rows/s against the same dispatch sequence with zero host time. Host time per
//          dispatch = from a batch's end to the next batch's start while work was queued,
//          measured by the worker (median and p99).
//   cpu:   CpuBackend (1 thread) serving the example MLP at batch 32 from one-row requests,
//          against CpuBackend called directly in a loop on the same batches (32 one-row
//          requests per job) in this process, before and after (their mean).
//   light: one request in flight at a time on a Sim model costing a fixed 100 us: ring-to-
//          completion latency above that compute, p50 and p99.
//   gpu:   with --gpu (a CUDA build on a GPU machine; scripts/gpu-check.sh run): the example
//          MLP at batch 32 on GPU 0 through the worker, against CudaBackend's graph replay
//          called directly in a loop on the same jobs (target >= 0.9).
// --check exits 1 when a ratio misses its target (sim >= 0.95, host p50 <= 5 us, cpu >= 0.95).
#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/testing/node_driver.h"
#include "tests/testing/shm_name.h"
#include "tests/testing/temp_dir.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"
#if defined(FERRY_HAVE_CUDA)
#include "worker/backends/cuda/cuda_backend.h"
#endif

namespace ferry {
namespace {

namespace fs = std::filesystem;
using testing::Completion;
using testing::NodeDriver;

// A repository of `count` copies of the example MLP named mlp-0, mlp-1, ...
std::string MakeRepository(const testing::TempDir& dir, const std::string& name, int count) {
  std::string repo = dir / name;
  std::ifstream in("examples/models/mlp/manifest.toml");
  std::stringstream text;
  text << in.rdbuf();
  for (int i = 0; i < count; ++i) {
    std::string model = "mlp-" + std::to_string(i);
    std::string manifest = text.str();
    manifest.replace(manifest.find("name = \"mlp\""), 12, "name = \"" + model + "\"");
    testing::WriteFile(repo + "/" + model + "/manifest.toml", manifest);
    fs::copy_file("examples/models/mlp/weights.safetensors",
                  repo + "/" + model + "/weights.safetensors");
  }
  return repo;
}

struct Worker {
  std::string name = testing::UniqueShmName("node-bench");
  shm::Segment segment = shm::Segment::Create(name, {1, 1, 1024, 256 << 20}).value();
  uint32_t slot = segment.WorkerSlot(0);
  pid_t pid = -1;

  Worker(const std::string& binary, const std::string& config) {
    pid = testing::StartWorker(binary, name, slot, config);
    if (!testing::WaitReady(segment, slot, pid, 120)) {
      std::cerr << "ferry-worker did not become ready\n";
      std::exit(2);
    }
  }
  ~Worker() {
    testing::StopWorker(segment, slot, pid);
    shm::Segment::Remove(name);
  }
  shm::StatusSnapshotData Status() const { return shm::ReadStatus(segment, slot).value(); }
};

// Keeps `window` one-row requests in flight per model for `seconds`.
int64_t g_rows = 8;  // Rows per request in the saturated runs (--rows).

void Saturate(NodeDriver& driver, const std::vector<uint32_t>& models, size_t window,
              double seconds, std::vector<size_t>* inflight,
              std::map<uint64_t, uint32_t>* model_of) {
  std::vector<uint8_t> input(static_cast<size_t>(g_rows) * 784 * 4, 0);
  std::vector<Completion> done;
  int64_t until = MonotonicNs() + static_cast<int64_t>(seconds * 1e9);
  while (MonotonicNs() < until) {
    for (uint32_t m : models) {
      while ((*inflight)[m] < window) {
        Result<uint64_t> seq = driver.Submit(m, 0, g_rows, {{DType::kF32, {g_rows, 784}, input}});
        if (!seq.ok()) {
          break;
        }
        (*model_of)[*seq] = m;
        ++(*inflight)[m];
      }
    }
    driver.Wait(200'000);
    driver.Poll(&done);
    for (const Completion& c : done) {
      auto it = model_of->find(c.sequence);
      --(*inflight)[it->second];
      model_of->erase(it);
    }
    done.clear();
  }
}

double SumCompute(const shm::StatusSnapshotData& s) {
  double total = 0;
  for (uint32_t m = 0; m < s.num_models; ++m) {
    total += s.models[m].total_compute_seconds;
  }
  return total;
}

uint64_t SumRows(const shm::StatusSnapshotData& s) {
  uint64_t total = 0;
  for (uint32_t m = 0; m < s.num_models; ++m) {
    total += s.models[m].rows_served;
  }
  return total;
}

nlohmann::json RunSim(const std::string& binary, const testing::TempDir& dir, double seconds) {
  std::string repo = MakeRepository(dir, "sim-models", 4);
  std::string config = dir / "sim.toml";
  testing::WriteFile(
      config, "[node]\ndevices = \"cpu:1\"\nbackend = \"sim\"\nmodel_repository = \"" + repo +
                  "\"\n[sim.models.mlp-0]\nfixed_us = 150\nper_row_us = 4\n"
                  "[sim.models.mlp-1]\nfixed_us = 200\nper_row_us = 6\n"
                  "[sim.models.mlp-2]\nfixed_us = 300\nper_row_us = 3\n"
                  "[sim.models.mlp-3]\nfixed_us = 100\nper_row_us = 8\n");
  Worker worker(binary, config);
  NodeDriver driver(worker.segment, 0, false);
  std::vector<size_t> inflight(4, 0);
  std::map<uint64_t, uint32_t> model_of;
  size_t window = static_cast<size_t>(96 / g_rows);  // Three batches of 32 rows per model.
  Saturate(driver, {0, 1, 2, 3}, window, 0.5, &inflight, &model_of);  // Warm-up.
  shm::StatusSnapshotData a = worker.Status();
  Saturate(driver, {0, 1, 2, 3}, window, seconds, &inflight, &model_of);
  shm::StatusSnapshotData b = worker.Status();
  double wall = static_cast<double>(b.published_ns - a.published_ns) * 1e-9;
  double busy = SumCompute(b) - SumCompute(a);
  nlohmann::json j;
  j["ratio_to_ideal"] = busy / wall;
  j["rows_per_s"] = static_cast<double>(SumRows(b) - SumRows(a)) / wall;
  j["dispatches_per_s"] = static_cast<double>(b.dispatches - a.dispatches) / wall;
  j["host_us_per_dispatch_p50"] = static_cast<double>(b.host_gap_p50_ns) / 1e3;
  j["host_us_per_dispatch_p99"] = static_cast<double>(b.host_gap_p99_ns) / 1e3;
  j["host_gap_samples"] = b.host_gap_samples;
  return j;
}

// Rows/s of `backend` executing the worker's batches (32 rows from g_rows-row requests) of the
// example MLP directly in a loop.
double DirectRowsPerSecond(Backend& backend, double seconds) {
  Result<std::vector<RepositoryModel>> repo = LoadRepository("examples/models");
  const Bundle* mlp = nullptr;
  for (const RepositoryModel& m : *repo) {
    if (m.name == "mlp") {
      mlp = m.bundle.get();
    }
  }
  ModelHandle handle = backend.Load(*mlp).value();
  // The worker's batches: 32 rows from requests of g_rows rows each.
  int64_t per_batch = 32 / g_rows;
  std::vector<std::vector<uint8_t>> inputs(per_batch, std::vector<uint8_t>(g_rows * 784 * 4, 0));
  std::vector<std::vector<uint8_t>> outputs(per_batch, std::vector<uint8_t>(g_rows * 10 * 4));
  BatchJob job{0, 32, {}};
  for (int64_t r = 0; r < per_batch; ++r) {
    job.requests.push_back({g_rows, {inputs[r]}, {outputs[r]}});
  }
  for (int i = 0; i < 20; ++i) {
    (void)backend.Execute(handle, job);
  }
  int64_t start = MonotonicNs();
  int64_t until = start + static_cast<int64_t>(seconds * 1e9);
  uint64_t rows = 0;
  while (MonotonicNs() < until) {
    (void)backend.Execute(handle, job);
    rows += 32;
  }
  return static_cast<double>(rows) / (static_cast<double>(MonotonicNs() - start) * 1e-9);
}

// One model (mlp-0) on a worker started with `config`, kept `rows_in_flight` rows deep,
// against `direct` executing the same batches in this process before and after (their mean).
nlohmann::json AgainstDirect(const std::string& binary, const std::string& config, Backend& direct,
                             size_t rows_in_flight, double seconds) {
  double before = DirectRowsPerSecond(direct, seconds);
  nlohmann::json j;
  double served = 0;
  {
    Worker worker(binary, config);
    NodeDriver driver(worker.segment, 0, false);
    std::vector<size_t> inflight(1, 0);
    std::map<uint64_t, uint32_t> model_of;
    size_t window = rows_in_flight / static_cast<size_t>(g_rows);
    Saturate(driver, {0}, window, 0.5, &inflight, &model_of);
    shm::StatusSnapshotData a = worker.Status();
    Saturate(driver, {0}, window, seconds, &inflight, &model_of);
    shm::StatusSnapshotData b = worker.Status();
    double wall = static_cast<double>(b.published_ns - a.published_ns) * 1e-9;
    served = static_cast<double>(SumRows(b) - SumRows(a)) / wall;
    j["rows_per_dispatch"] = static_cast<double>(SumRows(b) - SumRows(a)) /
                             static_cast<double>(b.dispatches - a.dispatches);
    j["busy_fraction"] = (SumCompute(b) - SumCompute(a)) / wall;  // Execution s per wall s.
    j["host_us_per_dispatch_p50"] = static_cast<double>(b.host_gap_p50_ns) / 1e3;
  }
  double after = DirectRowsPerSecond(direct, seconds);
  double mean = (before + after) / 2;
  j["worker_rows_per_s"] = served;
  j["direct_rows_per_s"] = mean;
  j["direct_before_after"] = {before, after};
  j["ratio_to_direct"] = served / mean;
  return j;
}

nlohmann::json RunCpu(const std::string& binary, const testing::TempDir& dir, double seconds) {
  std::string repo = MakeRepository(dir, "cpu-models", 1);
  std::string config = dir / "cpu.toml";
  testing::WriteFile(config, "[node]\ndevices = \"cpu:1\"\nmodel_repository = \"" + repo +
                                 "\"\n[cpu]\nthreads = 1\npin = false\n");
  CpuBackend direct(CpuOptions{CpuMode::kFast, 1});
  return AgainstDirect(binary, config, direct, 128, seconds);
}

#if defined(FERRY_HAVE_CUDA)
nlohmann::json RunGpu(const std::string& binary, const testing::TempDir& dir, double seconds) {
  std::string repo = MakeRepository(dir, "gpu-models", 1);
  std::string config = dir / "gpu.toml";
  testing::WriteFile(config, "[node]\ndevices = [0]\nmodel_repository = \"" + repo + "\"\n");
  Result<std::unique_ptr<CudaBackend>> direct = CudaBackend::Create({});
  if (!direct.ok()) {
    return {{"error", direct.error().ToString()}};
  }
  return AgainstDirect(binary, config, **direct, 256, seconds);
}
#endif

nlohmann::json RunLight(const std::string& binary, const testing::TempDir& dir, int samples) {
  std::string repo = MakeRepository(dir, "light-models", 1);
  std::string config = dir / "light.toml";
  testing::WriteFile(
      config, "[node]\ndevices = \"cpu:1\"\nbackend = \"sim\"\nmodel_repository = \"" + repo +
                  "\"\n[sim]\nfixed_us = 100\nper_row_us = 0\n");
  Worker worker(binary, config);
  NodeDriver driver(worker.segment, 0, false);
  std::vector<uint8_t> input(784 * 4, 0);
  std::vector<int64_t> overhead;
  std::vector<Completion> done;
  for (int i = 0; i < samples + 200; ++i) {
    (void)driver.Submit(0, 0, 1, {{DType::kF32, {1, 784}, input}});
    while (done.empty()) {
      driver.Wait(10'000'000);
      driver.Poll(&done);
    }
    if (i >= 200) {  // Warm-up first.
      overhead.push_back(done[0].completed_ns - done[0].submitted_ns - 100'000);
    }
    done.clear();
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // Let the worker idle.
  }
  std::sort(overhead.begin(), overhead.end());
  nlohmann::json j;
  j["compute_us"] = 100;
  j["overhead_us_p50"] = static_cast<double>(overhead[overhead.size() / 2]) / 1e3;
  j["overhead_us_p99"] = static_cast<double>(overhead[overhead.size() * 99 / 100]) / 1e3;
  j["samples"] = overhead.size();
  return j;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  CLI::App app{"ferry-node-bench: a ferry-worker process over the real rings"};
  bool json = false, check = false, gpu = false;
  double seconds = 2.0;
  std::string binary = FERRY_WORKER_BINARY;
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--check", check, "exit 1 when a ratio misses its target");
  app.add_flag("--gpu", gpu, "also measure a GPU worker against direct graph replay (CUDA build)");
  app.add_option("--seconds", seconds, "measured seconds per saturated run");
  app.add_option("--worker", binary, "the ferry-worker binary");
  app.add_option("--rows", ferry::g_rows,
                 "rows per request in the saturated runs (1, 2, 4, 8, 16, 32)")
      ->check(CLI::IsMember({1, 2, 4, 8, 16, 32}));
  CLI11_PARSE(app, argc, argv);
  ferry::testing::TempDir dir;
  nlohmann::json result;
  result["machine_cpus"] = std::thread::hardware_concurrency();
  result["rows_per_request"] = ferry::g_rows;
  result["sim"] = ferry::RunSim(binary, dir, seconds);
  result["cpu"] = ferry::RunCpu(binary, dir, seconds);
  result["light"] = ferry::RunLight(binary, dir, 2000);
  if (gpu) {
#if defined(FERRY_HAVE_CUDA)
    result["gpu"] = ferry::RunGpu(binary, dir, seconds);
#else
    result["gpu"] = {{"error", "this build has no CUDA backend"}};
#endif
  }
  bool pass = result["sim"]["ratio_to_ideal"].get<double>() >= 0.95 &&
              result["sim"]["host_us_per_dispatch_p50"].get<double>() <= 5.0 &&
              result["cpu"]["ratio_to_direct"].get<double>() >= 0.95;
  result["targets_met"] = pass;
  if (json) {
    std::cout << result.dump(2) << "\n";
  } else {
    const auto& s = result["sim"];
    const auto& c = result["cpu"];
    const auto& l = result["light"];
    std::cout << "ferry-node-bench (one worker process, driven over the rings)\n"
              << "  sim   ratio to ideal " << s["ratio_to_ideal"].get<double>()
              << " (target >= 0.95), " << s["rows_per_s"].get<double>()
              << " rows/s, host per dispatch p50 " << s["host_us_per_dispatch_p50"].get<double>()
              << " us (target <= 5), p99 " << s["host_us_per_dispatch_p99"].get<double>() << " us\n"
              << "  cpu   worker " << c["worker_rows_per_s"].get<double>() << " rows/s, direct "
              << c["direct_rows_per_s"].get<double>() << " rows/s, ratio "
              << c["ratio_to_direct"].get<double>() << " (target >= 0.95)\n"
              << "  light overhead above 100 us compute: p50 " << l["overhead_us_p50"].get<double>()
              << " us, p99 " << l["overhead_us_p99"].get<double>() << " us\n";
    if (result.contains("gpu")) {
      std::cout << "  gpu   " << result["gpu"].dump() << " (target ratio_to_direct >= 0.9)\n";
    }
  }
  return check && !pass ? 1 : 0;
}
