// Hook plugins through real processes: the example image classifier end to end through a
// worker; and crash isolation: a hook host process (ferry-test-hookhost, sandboxed) whose
// plugin crashes, escapes or hangs harms only itself, while this test's own hook host and the
// worker carry on, and the dead host's slot is reclaimed and reused.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <numeric>
#include <random>
#include <sstream>

#include "hookhost/hookhost.h"
#include "model/safetensors.h"
#include "shm/recovery.h"
#include "tests/testing/hookhost_test.h"
#include "tests/testing/worker_node.h"
#include "worker/backends/cpu/cpu_backend.h"

namespace ferry::hookhost {
namespace {

using testing::Get;

namespace fs = std::filesystem;
using testing::RandomFloats;

using testing::ReadAll;

// A bundle `name` made of `base`'s program and weights with hooks added (plugin copied in).
void AddHookedBundle(const std::string& repo, const std::string& name, const std::string& manifest,
                     const std::string& weights_of, const std::string& plugin) {
  std::string dir = repo + "/" + name;
  fs::create_directories(dir);
  testing::WriteFile(dir + "/manifest.toml", manifest);
  fs::copy_file("examples/models/" + weights_of + "/weights.safetensors",
                dir + "/weights.safetensors");
  fs::copy_file(plugin, dir + "/" + fs::path(plugin).filename().string());
}

// The mlp with the escape plugin doing `action` in its preprocess (or, as "create:ACTION", in
// its create()), named escape_`name`.
void AddEscapeBundle(const std::string& repo, const std::string& action, std::string name = "") {
  name = "escape_" + (name.empty() ? action : name);
  std::string manifest = ReadAll("examples/models/mlp/manifest.toml");
  manifest.replace(manifest.find("name = \"mlp\""), 12, "name = \"" + name + "\"");
  manifest += "\n[hooks]\nplugin = \"escape.so\"\nconfig = \"" + action + "\"\n";
  AddHookedBundle(repo, name, manifest, "mlp", std::string(FERRY_TEST_PLUGIN_DIR) + "/escape.so");
}

struct PluginNode {
  testing::TempDir dir;
  std::string name = testing::UniqueShmName("plugin");
  std::string repo;
  shm::Segment segment;
  pid_t worker = -1;

  // Bundles whose plugins misbehave in create(): only for tests that load them in the peer
  // (never through Local, which would run them in this process, unconfined).
  enum class AtCreate { kNone, kEscapes, kLingering };
  explicit PluginNode(AtCreate at_create = AtCreate::kNone)
      : segment(shm::Segment::Create(name, {2, 1, 256, 64 << 20}).value()) {
    std::string config = testing::NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n");
    repo = dir / "models";
    std::string classify = ReadAll("examples/hooks/cnn_classify.toml");
    AddHookedBundle(repo, "cnn_classify", classify, "cnn",
                    std::string(FERRY_EXAMPLE_PLUGIN_DIR) + "/image_classify.so");
    for (const char* action : {"wild_write", "spin", "sleep", "open", "crash"}) {
      AddEscapeBundle(repo, action);
    }
    for (const char* action : {"open", "connect", "execve", "fork", "write_file"}) {
      if (at_create == AtCreate::kEscapes) {
        AddEscapeBundle(repo, std::string("create:") + action, std::string("at_create_") + action);
      }
    }
    if (at_create == AtCreate::kLingering) {
      AddEscapeBundle(repo, "create:linger", "at_create_linger");
    }
    // Declares client outputs, but the escape plugin has no postprocess to produce them.
    std::string manifest = ReadAll("examples/models/mlp/manifest.toml");
    manifest.replace(manifest.find("name = \"mlp\""), 12, "name = \"no_postprocess\"");
    manifest +=
        "\n[hooks]\nplugin = \"escape.so\"\nconfig = \"open\"\n[[hooks.outputs]]\n"
        "name = \"top\"\ndtype = \"INT64\"\nshape = [-1, 1]\n";
    AddHookedBundle(repo, "no_postprocess", manifest, "mlp",
                    std::string(FERRY_TEST_PLUGIN_DIR) + "/escape.so");
    worker = testing::StartWorker(FERRY_WORKER_BINARY, name, segment.WorkerSlot(0), config);
    REQUIRE(testing::WaitReady(segment, segment.WorkerSlot(0), worker, 120));
  }
  ~PluginNode() {
    if (worker > 0) {
      kill(worker, SIGKILL);
      waitpid(worker, nullptr, 0);
    }
    shm::Segment::Remove(name);
  }
};

struct PeerResult {
  std::vector<std::string> lines;
  int exit_code = -1;
  int signal = 0;
};

// Runs ferry-test-hookhost on slot 1 and waits for it.
PeerResult RunPeer(const PluginNode& node, std::vector<std::string> args) {
  int out[2];
  REQUIRE(pipe(out) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    std::vector<std::string> all{FERRY_PEER_BINARY, "--segment", node.name, "--slot", "1",
                                 "--repository",    node.repo};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(out[0], buffer, sizeof(buffer))) > 0)
    text.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  PeerResult r;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) r.lines.push_back(line);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (r.signal != 0) MESSAGE("ferry-test-hookhost was killed by signal " << r.signal);
  return r;
}

// This test's own hook host, on slot 0.
struct Local {
  shm::Segment view;
  std::vector<HookModel> models;
  std::unique_ptr<HookHost> host;
  explicit Local(const PluginNode& node)
      : view(shm::Segment::Attach(node.name, 0).value()),
        models(LoadHookModels(node.repo).value()) {
    host = std::make_unique<HookHost>(view, 0, models, HookHostOptions{});
    host->Start();
  }
};

TEST_CASE("the example classifier: uint8 images in, the top 3 classes out, through a worker") {
  PluginNode node;
  Local local(node);
  HookHost* host = local.host.get();
  SafetensorsFile fx =
      SafetensorsFile::Open("tests/data/reference/image_classify.safetensors").value();
  std::span<const uint8_t> image = fx.Data(*fx.index().Find("image"));
  std::span<const uint8_t> pre = fx.Data(*fx.index().Find("preprocessed"));
  // Expected: the cnn run directly on numpy's preprocessed images, then the top 3.
  Result<Bundle> cnn = LoadBundle("examples/models/cnn");
  REQUIRE(cnn.ok());
  CpuBackend direct(CpuOptions{CpuMode::kFast, 1});
  ModelHandle handle = direct.Load(*cnn).value();
  std::vector<uint8_t> probs(4 * 10 * 4);
  BatchJob job{0, 4, {{4, {pre}, {probs}}}};
  REQUIRE(direct.Execute(handle, job).ok());
  auto top3 = [&](size_t row, std::vector<int64_t>* classes, std::vector<float>* scores) {
    std::vector<float> p(10);
    std::memcpy(p.data(), probs.data() + row * 40, 40);
    std::vector<int64_t> order(10);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    for (int k = 0; k < 3; ++k) {
      classes->push_back(order[k]);
      scores->push_back(p[order[k]]);
    }
  };
  // 4 images, and the same 4 ten times over (40 rows: split at 16 and joined).
  for (int copies : {1, 10}) {
    CAPTURE(copies);
    std::vector<uint8_t> batch;
    for (int c = 0; c < copies; ++c) batch.insert(batch.end(), image.begin(), image.end());
    InferRequest request;
    request.model = host->Find("cnn_classify");
    request.inputs.push_back({"image", DType::kU8, {4 * copies, 32, 32, 3}, batch});
    Result<InferResponse> r = Get(host->Submit(std::move(request)));
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    REQUIRE(r->outputs.size() == 2);
    CHECK(r->outputs[0].name == "scores");
    CHECK(r->outputs[1].name == "classes");
    CHECK(r->outputs[1].shape == Shape{4 * copies, 3});
    CHECK(r->timings.pieces == (copies == 1 ? 1 : 3));
    CHECK(r->timings.preprocess_ns > 0);
    CHECK(r->timings.postprocess_ns > 0);
    CHECK(r->timings.plugin_ns > 0);
    CHECK(r->timings.plugin_ns <= r->timings.preprocess_ns + r->timings.postprocess_ns);
    for (size_t row = 0; row < static_cast<size_t>(4 * copies); ++row) {
      std::vector<int64_t> classes;
      std::vector<float> scores;
      top3(row % 4, &classes, &scores);
      for (size_t k = 0; k < 3; ++k) {
        int64_t got_class;
        float got_score;
        std::memcpy(&got_class, r->outputs[1].bytes.data() + (row * 3 + k) * 8, 8);
        std::memcpy(&got_score, r->outputs[0].bytes.data() + (row * 3 + k) * 4, 4);
        CHECK(got_class == classes[k]);
        CHECK(std::fabs(got_score - scores[k]) < 1e-4);
      }
    }
  }
  // A plugin lacking the call its manifest's client tensors need: the model fails to load.
  InferRequest lacking;
  lacking.model = host->Find("no_postprocess");
  Result<InferResponse> unusable = Get(host->Submit(std::move(lacking)));
  REQUIRE_FALSE(unusable.ok());
  CHECK(unusable.error().code == ErrorCode::kUnavailable);
  CHECK(unusable.error().message.find(
            "the manifest declares hooks.outputs but its plugin has no postprocess") !=
        std::string::npos);
  // The client's tensors are checked against [[hooks.inputs]], not the model's.
  std::vector<uint8_t> floats(4 * 3 * 32 * 32 * 4);
  InferRequest wrong;
  wrong.model = host->Find("cnn_classify");
  wrong.inputs.push_back({"image", DType::kF32, {4, 3, 32, 32}, floats});
  Result<InferResponse> refused = Get(host->Submit(std::move(wrong)));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message ==
        "model 'cnn_classify': input 'image': expected UINT8 [-1, 32, 32, 3], got FP32 [4, 3, 32, "
        "32]");
  // Every block came back: client copies, plugin outputs (adopted by the one-piece requests,
  // copied into pieces for the 40-row one), and the worker's lent outputs.
  uint32_t worker_slot = node.segment.WorkerSlot(0);
  for (int i = 0; i < 2000 && (local.view.accounting(0).bytes_in_use.load() != 0 ||
                               node.segment.accounting(worker_slot).bytes_in_use.load() != 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(local.view.accounting(0).bytes_in_use.load() == 0);
  CHECK(node.segment.accounting(worker_slot).bytes_in_use.load() == 0);
}

TEST_CASE("a plugin that crashes takes down only its hook host; the slot is reclaimed and reused") {
  PluginNode node;
  Local local(node);
  HookHost* host = local.host.get();
  std::mt19937 rng(3);
  std::vector<uint8_t> input = RandomFloats(4 * 784, rng);
  // Our own traffic runs while the other hook host's plugin scribbles and dies.
  std::vector<std::future<Result<InferResponse>>> mine;
  for (int i = 0; i < 100; ++i) {
    InferRequest r;
    r.model = host->Find("mlp");
    r.inputs.push_back({"input", DType::kF32, {4, 784}, input});
    mine.push_back(host->Submit(std::move(r)));
  }
  for (const char* action : {"wild_write", "crash"}) {
    CAPTURE(action);
    PeerResult dead = RunPeer(
        node, {"--model", "mlp", "--model", std::string("escape_") + action, "--requests", "20"});
    CHECK(dead.exit_code == -1);
    CHECK((dead.signal == SIGSEGV || dead.signal == SIGBUS || dead.signal == SIGABRT));
    shm::ResetSlot(node.segment, 1);  // As ferryd does: its requests and memory are reclaimed.
    CHECK(node.segment.accounting(1).bytes_in_use.load() == 0);
  }
  for (auto& f : mine) {
    Result<InferResponse> r = Get(f);
    CHECK_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  }
  // A successor on the reclaimed slot serves.
  PeerResult successor = RunPeer(node, {"--model", "mlp", "--requests", "20"});
  CHECK(successor.exit_code == 0);
  CHECK(successor.lines == std::vector<std::string>(20, "ok"));
  // It released what the worker lent it before exiting: nothing waits for a reset.
  uint32_t worker_slot = node.segment.WorkerSlot(0);
  for (int i = 0; i < 2000 && node.segment.accounting(worker_slot).bytes_in_use.load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(node.segment.accounting(worker_slot).bytes_in_use.load() == 0);
}

TEST_CASE("in a sandboxed hook host, a forbidden call fails its request and the host serves on") {
  PluginNode node;
  PeerResult r = RunPeer(node, {"--model", "escape_open", "--model", "mlp", "--requests", "4"});
  CHECK(r.exit_code == 0);
  REQUIRE(r.lines.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(r.lines[i]);
    if (i % 2 == 0) {
      CHECK(r.lines[i].rfind("INTERNAL", 0) == 0);
      CHECK(r.lines[i].find("refused: open /etc/passwd (Operation not permitted)") !=
            std::string::npos);
    } else {
      CHECK(r.lines[i] == "ok");
    }
  }
}

TEST_CASE("a plugin's create() runs confined: each escape is refused, only its model fails") {
  PluginNode node(PluginNode::AtCreate::kEscapes);
  for (const char* action : {"open", "connect", "execve", "fork", "write_file"}) {
    CAPTURE(action);
    PeerResult r = RunPeer(node, {"--model", std::string("escape_at_create_") + action});
    CHECK(r.exit_code == 2);
    REQUIRE(r.lines.size() == 1);
    CAPTURE(r.lines[0]);
    CHECK(r.lines[0].rfind("unusable model 'escape_at_create_", 0) == 0);
    CHECK(r.lines[0].find("refused: ") != std::string::npos);
    CHECK(r.lines[0].find("ESCAPED") == std::string::npos);
  }
  // The same repository, its other models: served.
  PeerResult r = RunPeer(node, {"--model", "mlp", "--requests", "2"});
  CHECK(r.exit_code == 0);
  CHECK(r.lines == std::vector<std::string>{"ok", "ok"});
}

TEST_CASE("a hook host whose plugin left a thread running after create() refuses to serve") {
  PluginNode node(PluginNode::AtCreate::kLingering);
  PeerResult r = RunPeer(node, {"--model", "mlp", "--requests", "1"});
  CHECK(r.exit_code == 1);
  REQUIRE(r.lines.size() == 1);
  CHECK(r.lines[0].find("a plugin left 1 thread(s) running after create()") != std::string::npos);
}

TEST_CASE("a plugin call past its time limit fails only its request") {
  PluginNode node;
  PeerResult r = RunPeer(node, {"--model", "escape_spin", "--model", "mlp", "--requests", "4",
                                "--threads", "4", "--call-timeout-ms", "200"});
  CHECK(r.exit_code == 0);
  REQUIRE(r.lines.size() == 4);
  CHECK(
      r.lines[0] ==
      "DEADLINE_EXCEEDED model 'escape_spin': plugin preprocess ran past call_timeout_ms (200 ms)");
  CHECK(r.lines[1] == "ok");
  CHECK(r.lines[2] == r.lines[0]);
  CHECK(r.lines[3] == "ok");
}

TEST_CASE("a call past its limit makes its host ask for a restart, spinning or sleeping") {
  PluginNode node;
  for (std::string action : {"spin", "sleep"}) {
    CAPTURE(action);
    PeerResult r = RunPeer(node, {"--model", "escape_" + action, "--requests", "1", "--threads",
                                  "2", "--call-timeout-ms", "100", "--report-restart-ms", "8000"});
    CHECK(r.exit_code == 0);
    REQUIRE(r.lines.size() == 2);
    CHECK(r.lines[0].rfind("DEADLINE_EXCEEDED", 0) == 0);
    // Neither can be stopped inside the process: a spinning call takes a core, a sleeping one
    // a thread, for as long as it runs.
    CHECK(r.lines[1] == "restart: yes");
  }
}

}  // namespace
}  // namespace ferry::hookhost
