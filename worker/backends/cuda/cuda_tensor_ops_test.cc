// The CUDA backend's tensor ops (cuda_tensor_steps.cc) against the CPU reference backend,
// through whole programs: an attention block fed INT64 token ids, and the pools. Without a
// CUDA device the binary exits 77 and CTest reports the test skipped, never passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "model/shape_inference.h"
#include "tests/testing/temp_dir.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/cuda/cuda_test_support.h"

namespace ferry {
namespace {

// A bundle directory holding `manifest` and `weights` (seeded normal values where a weight
// has none).
Result<Bundle> MakeBundle(const std::string& name, const std::string& manifest,
                          std::vector<Float32Tensor> weights) {
  std::filesystem::path root = std::filesystem::temp_directory_path() /
                               ("ferry-cuda-" + name + "-" + std::to_string(getpid()));
  std::filesystem::path dir = root / name;  // A bundle's directory is its model's name.
  std::filesystem::create_directories(dir);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  for (Float32Tensor& w : weights) {
    if (w.values.empty()) {
      w.values.resize(static_cast<size_t>(*NumElements(w.shape)));
      for (float& v : w.values) {
        v = normal(rng);
      }
    }
  }
  testing::WriteFile((dir / "manifest.toml").string(), manifest);
  testing::WriteFile((dir / "weights.safetensors").string(), EncodeSafetensors(weights));
  Result<Bundle> bundle = LoadBundle(dir.string());
  std::filesystem::remove_all(root);
  return bundle;
}

std::string ProgramOp(const std::string& op, const std::string& input, const std::string& output,
                      const std::string& rest = "") {
  std::string in = input.front() == '[' ? "inputs = " + input : "input = \"" + input + "\"";
  return "[[program]]\nop = \"" + op + "\"\n" + in + "\noutput = \"" + output + "\"\n" + rest +
         "\n";
}

void CheckMatches(const Bundle& bundle, double tolerance) {
  Result<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create({});
  REQUIRE_MESSAGE(gpu.ok(), (gpu.ok() ? "" : gpu.error().message));
  CpuBackend cpu(CpuOptions{CpuMode::kReference, 0});
  Result<ModelHandle> g = (*gpu)->Load(bundle);
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.error().message));
  ModelHandle c = cpu.Load(bundle).value();
  std::mt19937 rng(23);
  for (int64_t size : bundle.manifest.batch_sizes) {
    Compare(**gpu, *g, cpu, c, bundle.manifest, 0, size, rng, tolerance);
  }
  CHECK((*gpu)->healthy());
}

// Token ids [N, 4] in [0, 9] and a 0/1 padding mask -> embeddings + positions -> layer norm -> one
// attention head pair with a padding mask -> [CLS] slice and mean, joined -> log_softmax and
// arg_max; sums and maxima over the heads' outputs beside.
const char* kAttention = R"(name = "attention"
[[inputs]]
name = "ids"
dtype = "INT64"
shape = [-1, 4]
range = [0, 9]
[[inputs]]
name = "mask"
dtype = "INT64"
shape = [-1, 4]
range = [0, 1]
[[outputs]]
name = "logp"
shape = [-1, 16]
[[outputs]]
name = "best"
dtype = "INT64"
shape = [-1]
[[outputs]]
name = "stats"
shape = [-1, 8]
[batching]
sizes = [1, 3, 8]
)";

}  // namespace

TEST_CASE("an attention block on INT64 ids matches the CPU backend at every size") {
  std::string m = kAttention;
  m += ProgramOp("gather", "ids", "e", "weight = \"table\"");
  m += ProgramOp("add", "e", "h", "weight = \"positions\"");
  m += ProgramOp("layernorm", "h", "n", "weight = \"ln_w\"\nbias = \"ln_b\"");
  m += ProgramOp("dense", "n", "q", "weight = \"wq\"\nbias = \"bq\"");
  m += ProgramOp("reshape", "q", "q4", "shape = [4, 2, 4]");
  m += ProgramOp("transpose", "q4", "qt", "perm = [0, 2, 1, 3]");
  m += ProgramOp("transpose", "qt", "kt", "perm = [0, 1, 3, 2]");
  m += ProgramOp("matmul", "[\"qt\", \"kt\"]", "s");
  m += ProgramOp("div", "s", "s2", "weight = \"scale\"");
  m += ProgramOp("reshape", "mask", "m4", "shape = [1, 1, 4]");
  m += ProgramOp("sub", "m4", "inv", "weight = \"one\"\nreverse = true");
  m += ProgramOp("mul", "inv", "bias", "weight = \"big\"");
  m += ProgramOp("add", "[\"s2\", \"bias\"]", "s3");
  m += ProgramOp("softmax", "s3", "p", "axis = -1");
  m += ProgramOp("matmul", "[\"p\", \"qt\"]", "o");
  m += ProgramOp("transpose", "o", "o2", "perm = [0, 2, 1, 3]");
  m += ProgramOp("reshape", "o2", "o3", "shape = [4, 8]");
  m += ProgramOp("slice", "o3", "first", "axis = 1\nstart = 0\nend = 1");
  m += ProgramOp("reshape", "first", "cls", "shape = [8]");
  m += ProgramOp("reduce_mean", "o3", "mean", "axis = 1");
  m += ProgramOp("concat", "[\"cls\", \"mean\"]", "c", "axis = 1");
  m += ProgramOp("log_softmax", "c", "logp", "axis = 1");
  m += ProgramOp("arg_max", "c", "best", "axis = 1");
  m += ProgramOp("reduce_sum", "o3", "sums", "axis = 2");
  m += ProgramOp("reduce_max", "o3", "maxima", "axis = 2");
  m += ProgramOp("concat", "[\"sums\", \"maxima\"]", "stats", "axis = 1");
  Result<Bundle> bundle = MakeBundle("attention", m,
                                     {{"table", {10, 8}, {}},
                                      {"positions", {4, 8}, {}},
                                      {"ln_w", {8}, {}},
                                      {"ln_b", {8}, {}},
                                      {"wq", {8, 8}, {}},
                                      {"bq", {8}, {}},
                                      {"scale", {1}, {2.f}},
                                      {"one", {1}, {1.f}},
                                      {"big", {1}, {-1e4f}}});
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  CheckMatches(*bundle, 1e-5);
}

TEST_CASE("average pooling, ceil-mode max pooling and a broadcast weight match the CPU") {
  std::string m = R"(name = "pools"
[[inputs]]
name = "x"
shape = [-1, 3, 7, 7]
[[outputs]]
name = "a"
shape = [-1, 3, 4, 4]
[[outputs]]
name = "b"
shape = [-1, 3, 4, 4]
[batching]
sizes = [1, 4]
)";
  m += ProgramOp("mul", "x", "xs", "weight = \"per_channel\"");
  m += ProgramOp("avgpool2d", "xs", "a", "kernel = 3\nstride = 2\npadding = 1\ncount_pad = true");
  m += ProgramOp("maxpool2d", "x", "b", "kernel = 2\nstride = 2\nceil = true");
  Result<Bundle> bundle = MakeBundle("pools", m, {{"per_channel", {3, 1, 1}, {}}});
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  CheckMatches(*bundle, 1e-6);
}

}  // namespace ferry

int main(int argc, char** argv) { return ferry::RunGpuTests(argc, argv); }
