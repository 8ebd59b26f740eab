// Pipelines through a real worker process: the example pipeline (the CNN as two chained
// models) against the whole CNN behind the example classifier; model calls in parallel and in
// sequence against the same models called directly; a pipeline's faults reaching its client
// with their codes; runs waiting on every hook thread at once; the worker's side (a pipeline
// is reported, never executed).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <random>

#include "hookhost/frontend/kserve_service.h"
#include "hookhost/hookhost.h"
#include "model/safetensors.h"
#include "tests/testing/hookhost_test.h"
#include "tests/testing/worker_node.h"

namespace ferry::hookhost {
namespace {

namespace fs = std::filesystem;
using testing::Get;
using testing::ReadAll;

void AddBundle(const std::string& repo, const std::string& name, const std::string& manifest,
               const std::string& weights_of, const std::string& plugin) {
  std::string dir = repo + "/" + name;
  fs::create_directories(dir);
  testing::WriteFile(dir + "/manifest.toml", manifest);
  if (!weights_of.empty()) {
    fs::copy_file("examples/models/" + weights_of + "/weights.safetensors",
                  dir + "/weights.safetensors");
  }
  if (!plugin.empty()) {
    fs::copy_file(plugin, dir + "/" + fs::path(plugin).filename().string());
  }
}

// The probe: clients send x [N, 784] and f [N, 64]; it answers mlp(x) and cnn_head(f).
std::string ProbeManifest(const std::string& name, const std::string& action,
                          const std::string& calls) {
  return "name = \"" + name +
         "\"\nkind = \"pipeline\"\n"
         "[[inputs]]\nname = \"x\"\ndtype = \"FP32\"\nshape = [-1, 784]\n"
         "[[inputs]]\nname = \"f\"\ndtype = \"FP32\"\nshape = [-1, 64]\n"
         "[[outputs]]\nname = \"logits\"\ndtype = \"FP32\"\nshape = [-1, 10]\n"
         "[[outputs]]\nname = \"probs\"\ndtype = \"FP32\"\nshape = [-1, 10]\n"
         "[pipeline]\ncalls = " +
         calls + "\n[hooks]\nplugin = \"pipeline_probe.so\"\nconfig = \"" + action + "\"\n";
}

struct PipelineNode {
  testing::TempDir dir;
  std::string name = testing::UniqueShmName("pipeline");
  std::string repo;
  shm::Segment segment;
  pid_t worker = -1;

  PipelineNode() : segment(shm::Segment::Create(name, {2, 1, 256, 64 << 20}).value()) {
    std::string config = testing::NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n");
    repo = dir / "models";
    std::string classify_so = std::string(FERRY_EXAMPLE_PLUGIN_DIR) + "/image_classify.so";
    std::string probe_so = std::string(FERRY_TEST_PLUGIN_DIR) + "/pipeline_probe.so";
    AddBundle(repo, "cnn_classify", ReadAll("examples/hooks/cnn_classify.toml"), "cnn",
              classify_so);
    AddBundle(repo, "cnn_features", ReadAll("examples/pipelines/cnn_features.toml"), "cnn", "");
    AddBundle(repo, "cnn_head", ReadAll("examples/pipelines/cnn_head.toml"), "cnn", "");
    AddBundle(repo, "image_pipeline", ReadAll("examples/pipelines/image_pipeline.toml"), "",
              classify_so);
    std::string both = "[\"mlp\", \"cnn_head\"]";
    for (const char* action : {"parallel", "sequential", "unlisted", "wrong_shape"}) {
      AddBundle(repo, std::string("probe_") + action,
                ProbeManifest(std::string("probe_") + action, action, both), "", probe_so);
    }
    AddBundle(repo, "calls_missing", ProbeManifest("calls_missing", "parallel", "[\"nope\"]"), "",
              probe_so);
    AddBundle(repo, "calls_pipeline",
              ProbeManifest("calls_pipeline", "parallel", "[\"image_pipeline\"]"), "", probe_so);
    // A stage whose bundle does not load, and a pipeline calling it (loaded, never ready).
    AddBundle(repo, "broken_stage", "name = \"broken_stage\"\n", "", "");
    AddBundle(repo, "calls_broken", ProbeManifest("calls_broken", "parallel", "[\"broken_stage\"]"),
              "", probe_so);
    worker = testing::StartWorker(FERRY_WORKER_BINARY, name, segment.WorkerSlot(0), config);
    REQUIRE(testing::WaitReady(segment, segment.WorkerSlot(0), worker, 120));
  }
  ~PipelineNode() {
    if (worker > 0) {
      kill(worker, SIGKILL);
      waitpid(worker, nullptr, 0);
    }
    shm::Segment::Remove(name);
  }
};

// This test's hook host, on slot 0.
struct Local {
  shm::Segment view;
  std::vector<HookModel> models;
  std::unique_ptr<HookHost> host;
  Local(const PipelineNode& node, int threads)
      : view(shm::Segment::Attach(node.name, 0).value()),
        models(LoadHookModels(node.repo).value()) {
    HookHostOptions options;
    options.threads = threads;
    host = std::make_unique<HookHost>(view, 0, models, options);
    host->Start();
  }
  uint32_t Index(const std::string& model) const {
    for (const HookModel& m : models) {
      if (m.name == model) return m.index;
    }
    FAIL("no model " << model);
    return 0;
  }
};

InferRequest Images(const HookHost& host, std::string_view model, std::span<const uint8_t> images,
                    int64_t n) {
  InferRequest r;
  r.model = host.Find(model);
  r.inputs.push_back({"image", DType::kU8, {n, 32, 32, 3}, images});
  return r;
}

void WaitBlocksBack(const PipelineNode& node, const Local& local) {
  uint32_t worker_slot = node.segment.WorkerSlot(0);
  for (int i = 0; i < 400 && (local.view.accounting(0).bytes_in_use.load() != 0 ||
                              node.segment.accounting(worker_slot).bytes_in_use.load() != 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(local.view.accounting(0).bytes_in_use.load() == 0);
  CHECK(node.segment.accounting(worker_slot).bytes_in_use.load() == 0);
}

TEST_CASE("the example pipeline (features into head) answers what the whole CNN answers") {
  PipelineNode node;
  Local local(node, 4);
  SafetensorsFile fx =
      SafetensorsFile::Open("tests/data/reference/image_classify.safetensors").value();
  std::span<const uint8_t> image = fx.Data(*fx.index().Find("image"));
  // 4 images, and the same 4 ten times over (40 rows: each call split at 16 and joined).
  for (int copies : {1, 10}) {
    CAPTURE(copies);
    std::vector<uint8_t> batch;
    for (int c = 0; c < copies; ++c) batch.insert(batch.end(), image.begin(), image.end());
    Result<InferResponse> whole =
        Get(local.host->Submit(Images(*local.host, "cnn_classify", batch, 4 * copies)));
    Result<InferResponse> piped =
        Get(local.host->Submit(Images(*local.host, "image_pipeline", batch, 4 * copies)));
    REQUIRE_MESSAGE(whole.ok(), (whole.ok() ? "" : whole.error().message));
    REQUIRE_MESSAGE(piped.ok(), (piped.ok() ? "" : piped.error().message));
    REQUIRE(piped->outputs.size() == 2);
    CHECK(piped->outputs[0].name == "scores");
    CHECK(piped->outputs[1].name == "classes");
    CHECK(piped->outputs[1].shape == Shape{4 * copies, 3});
    CHECK(piped->outputs[1].bytes == whole->outputs[1].bytes);  // The same classes.
    REQUIRE(piped->outputs[0].bytes.size() == whole->outputs[0].bytes.size());
    for (size_t i = 0; i < piped->outputs[0].bytes.size() / 4; ++i) {
      float a, b;
      std::memcpy(&a, piped->outputs[0].bytes.data() + i * 4, 4);
      std::memcpy(&b, whole->outputs[0].bytes.data() + i * 4, 4);
      CHECK(std::fabs(a - b) < 1e-5);
    }
    CHECK(piped->timings.pieces == 2);  // Two model calls.
    CHECK(piped->timings.compute_ns > 0);
    CHECK(piped->timings.plugin_ns > 0);
    CHECK(piped->timings.plugin_ns <= piped->timings.postprocess_ns);
  }
  WaitBlocksBack(node, local);
}

TEST_CASE("model calls at once and in sequence answer what the models answer when called") {
  PipelineNode node;
  Local local(node, 4);
  std::mt19937 rng(11);
  std::vector<uint8_t> x = testing::RandomFloats(3 * 784, rng);
  std::vector<uint8_t> f = testing::RandomFloats(3 * 64, rng);
  InferRequest mlp;
  mlp.model = local.host->Find("mlp");
  mlp.inputs.push_back({"input", DType::kF32, {3, 784}, x});
  InferRequest head;
  head.model = local.host->Find("cnn_head");
  head.inputs.push_back({"features", DType::kF32, {3, 64}, f});
  Result<InferResponse> want_logits = Get(local.host->Submit(mlp));
  Result<InferResponse> want_probs = Get(local.host->Submit(head));
  REQUIRE(want_logits.ok());
  REQUIRE(want_probs.ok());
  for (const char* probe : {"probe_parallel", "probe_sequential"}) {
    CAPTURE(probe);
    InferRequest r;
    r.model = local.host->Find(probe);
    r.inputs.push_back({"f", DType::kF32, {3, 64}, f});  // Any order: matched by name.
    r.inputs.push_back({"x", DType::kF32, {3, 784}, x});
    Result<InferResponse> got = Get(local.host->Submit(std::move(r)));
    REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
    REQUIRE(got->outputs.size() == 2);
    CHECK(testing::SameFloats(got->outputs[0].bytes, want_logits->outputs[0].bytes));
    CHECK(testing::SameFloats(got->outputs[1].bytes, want_probs->outputs[0].bytes));
    CHECK(got->timings.pieces == 2);
  }
  WaitBlocksBack(node, local);
}

TEST_CASE("a pipeline's faults reach its client with their codes; broken pipelines never load") {
  PipelineNode node;
  Local local(node, 2);
  std::vector<uint8_t> x(784 * 4), f(64 * 4);
  auto probe = [&](const std::string& model) {
    InferRequest r;
    r.model = local.host->Find(model);
    r.inputs.push_back({"x", DType::kF32, {1, 784}, x});
    r.inputs.push_back({"f", DType::kF32, {1, 64}, f});
    return Get(local.host->Submit(std::move(r)));
  };
  Result<InferResponse> unlisted = probe("probe_unlisted");
  REQUIRE_FALSE(unlisted.ok());
  CHECK(unlisted.error().code == ErrorCode::kNotFound);
  CHECK(unlisted.error().message.find("called model 'cnn_features'; its [pipeline] calls lists "
                                      "only mlp, cnn_head") != std::string::npos);
  Result<InferResponse> wrong = probe("probe_wrong_shape");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == ErrorCode::kInvalidArgument);
  CHECK(wrong.error().message.find("model 'mlp': input 'input': expected FP32 [-1, 784]") !=
        std::string::npos);
  for (const char* broken : {"calls_missing", "calls_pipeline"}) {
    CAPTURE(broken);
    Result<InferResponse> r = probe(broken);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kUnavailable);
    CHECK(r.error().message.find(std::string(broken) == "calls_missing"
                                     ? "'nope', which is not in the repository"
                                     : "'image_pipeline', another pipeline") != std::string::npos);
  }
  // The client's tensors are checked against the pipeline's [[inputs]] before its run.
  InferRequest floats;
  floats.model = local.host->Find("image_pipeline");
  std::vector<uint8_t> wrong_image(32 * 32 * 3 * 4);
  floats.inputs.push_back({"image", DType::kF32, {1, 32, 32, 3}, wrong_image});
  Result<InferResponse> refused = Get(local.host->Submit(std::move(floats)));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "model 'image_pipeline': input 'image': expected UINT8 [-1, 32, 32, 3], got FP32 [1, 32, "
        "32, 3]");
  WaitBlocksBack(node, local);
}

TEST_CASE("pipeline runs waiting on every hook thread at once still finish (no deadlock)") {
  PipelineNode node;
  Local local(node, 1);  // One hook thread: every run blocks it while its calls are out.
  std::vector<uint8_t> images(8 * 32 * 32 * 3, 128);
  std::vector<std::future<Result<InferResponse>>> futures;
  for (int i = 0; i < 8; ++i) {
    futures.push_back(local.host->Submit(Images(*local.host, "image_pipeline", images, 8)));
  }
  for (auto& future : futures) {
    Result<InferResponse> r = Get(future);
    CHECK_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  }
  WaitBlocksBack(node, local);
}

TEST_CASE("a worker reports a pipeline as one and refuses to execute it") {
  PipelineNode node;
  Local local(node, 1);
  uint32_t pipeline = local.Index("image_pipeline");
  shm::StatusSnapshotData status =
      shm::ReadStatus(node.segment, node.segment.WorkerSlot(0)).value();
  REQUIRE(pipeline < status.num_models);
  CHECK(status.models[pipeline].state == static_cast<uint32_t>(shm::ModelLoadState::kPipeline));
  CHECK(status.models[local.Index("cnn_head")].state ==
        static_cast<uint32_t>(shm::ModelLoadState::kReady));
  // A (buggy or hostile) hook host sending it to the worker anyway gets an error, not a run.
  testing::NodeDriver driver(node.segment, 1);
  std::vector<uint8_t> image(32 * 32 * 3);
  REQUIRE(driver.Submit(pipeline, 0, 1, {{DType::kU8, {1, 32, 32, 3}, image}}).ok());
  std::vector<testing::Completion> done;
  testing::PollUntil(driver, &done, [&] { return !done.empty(); });
  REQUIRE(done.size() == 1);
  CHECK(done[0].code() == ErrorCode::kInvalidArgument);
  CHECK(done[0].message.find("is a pipeline") != std::string::npos);
}

TEST_CASE("a pipeline is ready when every model it calls is; the repository index says so") {
  PipelineNode node;
  Local local(node, 1);
  FrontendSettings settings;
  settings.max_request_bytes = 1 << 20;
  frontend::KServeService service(local.view, local.models, local.host.get(), settings);
  auto find = [&](const std::string& name) {
    const HookModel* m = service.Find(name);
    REQUIRE(m != nullptr);
    return m;
  };
  CHECK(service.ModelReady(*find("image_pipeline")));
  CHECK_FALSE(find("calls_broken")->failure.has_value());  // It loaded: its callee exists.
  CHECK_FALSE(service.ModelReady(*find("calls_broken")));  // But that callee never serves.
  nlohmann::json index = service.RepositoryIndex(false);
  std::map<std::string, std::string> state;
  for (const nlohmann::json& m : index) {
    state[m["name"].get<std::string>()] = m["state"].get<std::string>();
  }
  CHECK(state["image_pipeline"] == "READY");
  CHECK(state["calls_broken"] == "UNAVAILABLE");
  CHECK(state["broken_stage"] == "UNAVAILABLE");
  for (const nlohmann::json& m : service.RepositoryIndex(true)) {
    CHECK(m["state"] == "READY");
  }
  // Its run (the probe's) calls models it does not list: NOT_FOUND, naming the model.
  std::vector<uint8_t> x(784 * 4), f(64 * 4);
  InferRequest r;
  r.model = local.host->Find("calls_broken");
  r.inputs.push_back({"x", DType::kF32, {1, 784}, x});
  r.inputs.push_back({"f", DType::kF32, {1, 64}, f});
  Result<InferResponse> answer = Get(local.host->Submit(std::move(r)));
  REQUIRE_FALSE(answer.ok());
  CHECK(answer.error().message.find("called model 'mlp'") != std::string::npos);
}

}  // namespace
}  // namespace ferry::hookhost

namespace ferry::hookhost {
namespace {

TEST_CASE("a cancelled pipeline request is answered at once; a run not begun never runs") {
  PipelineNode node;
  Local local(node, 1);  // One run at a time: the later requests wait for a run slot.
  std::vector<uint8_t> images(8 * 32 * 32 * 3, 128);
  std::vector<std::future<Result<InferResponse>>> kept, cancelled;
  std::vector<std::shared_ptr<CancelSignal>> signals;
  for (int i = 0; i < 8; ++i) {
    InferRequest r = Images(*local.host, "image_pipeline", images, 8);
    if (i >= 4) {
      r.cancel = signals.emplace_back(std::make_shared<CancelSignal>());
    }
    (i < 4 ? kept : cancelled).push_back(local.host->Submit(std::move(r)));
  }
  for (const std::shared_ptr<CancelSignal>& signal : signals) {
    signal->Fire();
  }
  for (auto& future : cancelled) {
    Result<InferResponse> r = Get(future);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kCancelled);
  }
  for (auto& future : kept) {
    Result<InferResponse> r = Get(future);
    CHECK_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  }
  WaitBlocksBack(node, local);
  // Only the four kept runs called their stages (the worker publishes every 5 ms).
  auto served = [&](const char* model) {
    return shm::ReadStatus(node.segment, node.segment.WorkerSlot(0))
        .value()
        .models[local.Index(model)]
        .requests_served;
  };
  for (int i = 0; i < 2000 && served("cnn_head") < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // Nothing more comes.
  shm::StatusSnapshotData s = shm::ReadStatus(node.segment, node.segment.WorkerSlot(0)).value();
  CHECK(s.models[local.Index("cnn_features")].requests_served == 4);
  CHECK(s.models[local.Index("cnn_head")].requests_served == 4);
  const shm::FrontEndCountersData& counters = node.segment.frontend_counters(0);
  uint32_t pipeline = local.Index("image_pipeline");
  CHECK(counters.models[pipeline][0].answered[0].load() == 4);
  CHECK(counters.models[pipeline][0].plugin_ns.load() > 0);  // The runs' own time.
  CHECK(counters.models[pipeline][0]
            .answered[static_cast<size_t>(ErrorCode::kCancelled) + 1]
            .load() == 4);
}

}  // namespace
}  // namespace ferry::hookhost
