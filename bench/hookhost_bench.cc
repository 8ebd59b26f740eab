// ferry-hookhost-bench [--json] [--seconds S]: the hook host's request flow against a real
// ferry-worker process (SimBackend: 20 us per dispatch + 1 us per row, outputs zeros), on the
// example classifier bundle (uint8 image preprocess, top-3 postprocess), in one run:
//   threads: requests/s with 1, 2 and 4 hook threads, 64 one-image requests kept in flight,
//            against the same plugin's preprocess + postprocess called directly in a loop by
//            as many threads on heap buffers (what the plugins alone allow, with no transport,
//            validation, arena or worker at all): ratio = through the hook host / direct.
//   light:   one request in flight at a time: the hook host's added latency per request,
//            total server time minus the time inside plugin calls minus the worker's queue
//            and compute (what the worker reported): p50 and p99.
//   pipeline: the example pipeline (the same plugin's run: the CNN as two chained model
//            calls) against cnn_classify (one model) in the same run: requests/s with 4 hook
//            threads and 64 in flight, and the light-load added latency of each; the ratios
//            are what a pipeline's second call costs the hook host.
#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/logging.h"
#include "hookhost/hookhost.h"
#include "tests/testing/node_driver.h"
#include "tests/testing/shm_name.h"
#include "tests/testing/temp_dir.h"

namespace ferry::hookhost {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A repository holding the example classifier bundle and the example pipeline with its two
// stages; returns the node file.
std::string MakeNode(const testing::TempDir& dir) {
  auto add = [&](const std::string& name, const std::string& manifest, bool weights, bool plugin) {
    std::string bundle = dir / ("models/" + name);
    fs::create_directories(bundle);
    testing::WriteFile(bundle + "/manifest.toml", ReadAll(manifest));
    if (weights) {
      fs::copy_file("examples/models/cnn/weights.safetensors", bundle + "/weights.safetensors");
    }
    if (plugin) {
      fs::copy_file(std::string(FERRY_EXAMPLE_PLUGIN_DIR) + "/image_classify.so",
                    bundle + "/image_classify.so");
    }
  };
  add("cnn_classify", "examples/hooks/cnn_classify.toml", true, true);
  add("cnn_features", "examples/pipelines/cnn_features.toml", true, false);
  add("cnn_head", "examples/pipelines/cnn_head.toml", true, false);
  add("image_pipeline", "examples/pipelines/image_pipeline.toml", false, true);
  std::string config = dir / "node.toml";
  testing::WriteFile(config,
                     "[node]\nname = \"bench\"\ndevices = \"cpu:1\"\nbackend = \"sim\"\n"
                     "model_repository = \"" +
                         dir / "models" + "\"\n[sim]\nfixed_us = 20\nper_row_us = 1\n");
  return config;
}

struct Node {
  testing::TempDir dir;
  std::string config = MakeNode(dir);
  std::string name = testing::UniqueShmName("hookhost-bench");
  shm::Segment segment = shm::Segment::Create(name, {1, 1, 1024, 256 << 20}).value();
  pid_t worker = -1;
  Node() {
    worker = testing::StartWorker(FERRY_WORKER_BINARY, name, segment.WorkerSlot(0), config);
    if (!testing::WaitReady(segment, segment.WorkerSlot(0), worker, 120)) {
      std::cerr << "ferry-worker did not become ready\n";
      std::exit(2);
    }
  }
  ~Node() {
    testing::StopWorker(segment, segment.WorkerSlot(0), worker);
    shm::Segment::Remove(name);
  }
};

// Requests/s of `done` over `seconds`, after `warm` of running.
template <typename Counter>
double RateOver(const Counter& done, double seconds, std::chrono::milliseconds warm) {
  std::this_thread::sleep_for(warm);
  int64_t start_done = done.load();
  int64_t start = MonotonicNs();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  int64_t end_done = done.load();
  int64_t end = MonotonicNs();
  return static_cast<double>(end_done - start_done) / (static_cast<double>(end - start) * 1e-9);
}

std::vector<uint8_t> Image() {
  std::vector<uint8_t> image(32 * 32 * 3);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 7);
  return image;
}

InferRequest Request(const HookHost& host, const std::vector<uint8_t>& image,
                     std::string_view model = "cnn_classify") {
  InferRequest r;
  r.model = host.Find(model);
  r.inputs.push_back({"image", DType::kU8, {1, 32, 32, 3}, image});
  return r;
}

// Requests/s through the hook host with `threads` hook threads and `inflight` in flight.
double ThroughHookHost(const Node& node, const std::vector<HookModel>& models, int threads,
                       int inflight, double seconds, const std::string& model = "cnn_classify") {
  shm::Segment view = shm::Segment::Attach(node.name, 0).value();
  HookHostOptions options;
  options.threads = threads;
  HookHost host(view, 0, models, options);
  host.Start();
  std::vector<uint8_t> image = Image();
  std::atomic<int64_t> done{0}, failed{0};
  std::mutex error_mutex;
  std::string first_error;
  std::atomic<bool> stop{false};
  std::atomic<int> live{0};
  std::mutex mutex;
  std::condition_variable drained;
  std::function<void()> send = [&] {
    live.fetch_add(1);
    host.Submit(Request(host, image, model), [&](Result<InferResponse> r) {
      (r.ok() ? done : failed).fetch_add(1);
      if (!r.ok()) {
        std::lock_guard lock(error_mutex);
        if (first_error.empty()) first_error = r.error().ToString();
      }
      if (!stop.load()) {
        send();
      }
      if (live.fetch_sub(1) == 1) {
        std::lock_guard lock(mutex);
        drained.notify_all();
      }
    });
  };
  for (int i = 0; i < inflight; ++i) send();  // Fill the pipeline, then count.
  double rate = RateOver(done, seconds, std::chrono::milliseconds(200));
  stop.store(true);
  std::unique_lock lock(mutex);
  drained.wait_for(lock, std::chrono::seconds(30), [&] { return live.load() == 0; });
  if (failed.load() != 0) {
    throw std::runtime_error(std::to_string(failed.load()) +
                             " requests failed, the first: " + first_error);
  }
  return rate;
}

// Requests/s of the plugin's preprocess + postprocess called directly by `threads` threads.
double Direct(const HookModel& model, int threads, double seconds) {
  std::vector<uint8_t> image = Image();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::vector<std::vector<uint8_t>> buffers(3);
      auto heap = [&](uint32_t index, DType dtype, const Shape& shape) {
        buffers[index].resize(TensorByteSize(dtype, shape).value());
        return std::optional<AllocatedTensor>(AllocatedTensor{dtype, shape, buffers[index], 0});
      };
      std::vector<float> probs(10, 0.0f);  // What the Sim worker returns: zeros.
      std::vector<std::string> in_names{"image"}, out_names{"scores", "classes"};
      while (!stop.load(std::memory_order_relaxed)) {
        TensorView view{"image", DType::kU8, {1, 32, 32, 3}, image};
        std::vector<AllocatedTensor> out;
        (void)model.plugin->Preprocess(std::span(&view, 1), in_names, heap, &out);
        TensorView p{
            "probs", DType::kF32, {1, 10}, {reinterpret_cast<const uint8_t*>(probs.data()), 40}};
        std::vector<AllocatedTensor> response;
        (void)model.plugin->Postprocess(
            std::span(&p, 1), out_names,
            [&](uint32_t index, DType dtype, const Shape& shape) {
              return heap(index + 1, dtype, shape);
            },
            &response);
        volatile uint8_t touch = buffers[0][100] ^ buffers[2][0];  // The results are read.
        (void)touch;
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  double rate = RateOver(done, seconds, std::chrono::milliseconds(100));
  stop.store(true);
  for (std::thread& t : workers) t.join();
  return rate;
}

struct Light {
  double overhead_p50_us, overhead_p99_us, total_p50_us;
};

Light LightLoad(const Node& node, const std::vector<HookModel>& models, int count,
                const std::string& model = "cnn_classify") {
  shm::Segment view = shm::Segment::Attach(node.name, 0).value();
  HookHost host(view, 0, models, HookHostOptions{});
  host.Start();
  std::vector<uint8_t> image = Image();
  std::vector<double> overhead, total;
  for (int i = 0; i < count + 50; ++i) {
    Result<InferResponse> r = host.Submit(Request(host, image, model)).get();
    if (!r.ok()) {
      throw std::runtime_error(r.error().ToString());
    }
    if (i < 50) continue;  // Warm-up.
    const RequestTimings& t = r->timings;
    overhead.push_back(static_cast<double>(t.total_ns - t.plugin_ns - t.queue_ns - t.compute_ns) *
                       1e-3);
    total.push_back(static_cast<double>(t.total_ns) * 1e-3);
  }
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  return {pct(overhead, 0.5), pct(overhead, 0.99), pct(total, 0.5)};
}

}  // namespace
}  // namespace ferry::hookhost

int Run(bool json, double seconds, int light_count);

int main(int argc, char** argv) {
  using namespace ferry::hookhost;
  CLI::App app{"ferry-hookhost-bench: the hook host's flow against its plugins called directly"};
  bool json = false;
  double seconds = 2;
  int light_count = 2000;
  app.add_flag("--json", json);
  app.add_option("--seconds", seconds, "measuring time per thread count");
  app.add_option("--light", light_count, "requests of the light-load run");
  CLI11_PARSE(app, argc, argv);
  (void)ferry::InitLogging("ferry-hookhost-bench", ferry::LogFormat::kText, "warn");
  try {
    return Run(json, seconds, light_count);
  } catch (const std::exception& e) {  // After the worker was stopped (Node's destructor).
    std::cerr << "ferry-hookhost-bench: " << e.what() << "\n";
    return 2;
  }
}

int Run(bool json, double seconds, int light_count) {
  using namespace ferry::hookhost;
  Node node;
  std::vector<HookModel> models = LoadHookModels(node.dir / "models").value();
  for (const HookModel& m : models) {
    if (m.failure) {
      std::cerr << "bundle " << m.name << " did not load: " << m.failure->message << "\n";
      return 2;
    }
  }
  const HookModel& classify = models[0];  // Name order: cnn_classify first.
  nlohmann::json out;
  out["machine"]["cpus"] = std::thread::hardware_concurrency();
  std::cout << (json ? "" : "threads  hookhost req/s  direct req/s  ratio\n");
  for (int threads : {1, 2, 4}) {
    double through = ThroughHookHost(node, models, threads, 64, seconds);
    double direct = Direct(classify, threads, seconds);
    std::string key = std::to_string(threads);
    out["threads"][key] = {
        {"hookhost_rps", through}, {"direct_rps", direct}, {"ratio", through / direct}};
    if (!json) {
      std::printf("%7d  %15.0f  %12.0f  %5.3f\n", threads, through, direct, through / direct);
    }
  }
  Light light = LightLoad(node, models, light_count);
  out["light"] = {{"overhead_us_p50", light.overhead_p50_us},
                  {"overhead_us_p99", light.overhead_p99_us},
                  {"total_us_p50", light.total_p50_us}};
  double whole_rps = ThroughHookHost(node, models, 4, 64, seconds);
  double piped_rps = ThroughHookHost(node, models, 4, 64, seconds, "image_pipeline");
  Light piped = LightLoad(node, models, light_count, "image_pipeline");
  out["pipeline"] = {{"pipeline_rps", piped_rps},
                     {"single_model_rps", whole_rps},
                     {"rps_ratio", piped_rps / whole_rps},
                     {"overhead_us_p50", piped.overhead_p50_us},
                     {"overhead_us_p99", piped.overhead_p99_us},
                     {"total_us_p50", piped.total_p50_us},
                     {"overhead_ratio_p50", piped.overhead_p50_us / light.overhead_p50_us}};
  if (json) {
    std::cout << out.dump() << "\n";
  } else {
    std::printf("light load: added latency p50 %.1f us, p99 %.1f us (total p50 %.1f us)\n",
                light.overhead_p50_us, light.overhead_p99_us, light.total_p50_us);
    std::printf(
        "pipeline (2 chained calls) vs cnn_classify (1 model), 4 threads: %.0f vs %.0f req/s "
        "(%.3f); light-load added latency p50 %.1f us, p99 %.1f us (%.2fx), total p50 %.1f us\n",
        piped_rps, whole_rps, piped_rps / whole_rps, piped.overhead_p50_us, piped.overhead_p99_us,
        piped.overhead_p50_us / light.overhead_p50_us, piped.total_p50_us);
  }
  return 0;
}
