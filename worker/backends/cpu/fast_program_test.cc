// The fast path's compilation choices (fast_program.h): convolution outputs kept in oneDNN's
// blocked layouts between primitives, and elementwise ops fused into a matmul as post-ops.
// Each test builds a graph that crosses every boundary of one choice and compares each output
// with the reference executor.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "tests/testing/temp_dir.h"
#include "worker/backends/cpu/cpu_backend.h"

namespace ferry {
namespace {

struct Tensor {
  std::string name;
  Shape shape;
};

// A safetensors file of seeded normal values, 0.3 standard deviation, for every tensor.
std::string RandomWeights(const std::vector<Tensor>& tensors) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 0.3f);
  std::string header = "{", data;
  for (const Tensor& t : tensors) {
    int64_t count = 1;
    std::string dims;
    for (int64_t d : t.shape) {
      count *= d;
      dims += (dims.empty() ? "" : ",") + std::to_string(d);
    }
    size_t begin = data.size();
    for (int64_t i = 0; i < count; ++i) {
      float v = normal(rng);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name +
              R"(":{"dtype":"F32","shape":[)" + dims + "],\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  return testing::SafetensorsBytes(header + "}", data);
}

// x [N, 3, 8, 8] -> conv a (24 channels: a blocked layout pads them) read by a relu and by an
// add; a second conv; the add of two blocked tensors with its relu fused; a sigmoid (plain:
// it does not keep the padding zero) added back to a blocked tensor; max pooling; a third conv
// whose blocked output is a model output; global average pooling; and t, both an output and
// read by later steps.
std::string LayoutBundle(const testing::TempDir& dir) {
  std::string path = dir.path() + "/layouts";
  std::filesystem::create_directory(path);
  testing::WriteFile(path + "/manifest.toml", R"(name = "layouts"
[[inputs]]
name = "x"
shape = [-1, 3, 8, 8]
[[outputs]]
name = "q"
shape = [-1, 8, 4, 4]
[[outputs]]
name = "m"
shape = [-1, 8]
[[outputs]]
name = "t"
shape = [-1, 24, 8, 8]
[batching]
sizes = [1, 4]
[[program]]
op = "conv2d"
input = "x"
output = "a"
weight = "w1"
bias = "b1"
padding = 1
[[program]]
op = "relu"
input = "a"
output = "r"
[[program]]
op = "conv2d"
input = "r"
output = "b"
weight = "w2"
[[program]]
op = "add"
inputs = ["a", "b"]
output = "s"
[[program]]
op = "relu"
input = "s"
output = "t"
[[program]]
op = "sigmoid"
input = "t"
output = "g"
[[program]]
op = "add"
inputs = ["g", "t"]
output = "u"
[[program]]
op = "maxpool2d"
input = "u"
output = "p"
kernel = 2
[[program]]
op = "conv2d"
input = "p"
output = "q"
weight = "w3"
padding = 1
[[program]]
op = "global_avgpool"
input = "q"
output = "m"
)");
  testing::WriteFile(
      path + "/weights.safetensors",
      RandomWeights(
          {{"w1", {24, 3, 3, 3}}, {"b1", {24}}, {"w2", {24, 24, 1, 1}}, {"w3", {8, 24, 3, 3}}}));
  return path;
}

// Runs the bundle at `dir` through both CPU modes at each compiled size (with a padding row
// where the size allows) on seeded inputs and checks every output within 1e-5 of the reference,
// relative to its scale. `in_row` and `out_row`: each input's and output's elements per row.
void CheckFastMatchesReference(const std::string& dir, const std::vector<int64_t>& in_row,
                               const std::vector<int64_t>& out_row) {
  Result<Bundle> bundle = LoadBundle(dir);
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  CpuBackend fast(CpuOptions{CpuMode::kFast, 2}), reference(CpuOptions{CpuMode::kReference, 2});
  ModelHandle f = fast.Load(*bundle).value(), r = reference.Load(*bundle).value();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int64_t size : bundle->manifest.batch_sizes) {
    CAPTURE(size);
    int64_t rows = std::max<int64_t>(1, size - 1);
    std::vector<std::vector<float>> inputs;
    for (int64_t n : in_row) {
      inputs.emplace_back(static_cast<size_t>(rows * n));
      for (float& v : inputs.back()) {
        v = normal(rng);
      }
    }
    auto run = [&](CpuBackend& backend, ModelHandle handle) {
      std::vector<std::vector<float>> outs;
      RequestIo io{rows, {}, {}};
      for (const std::vector<float>& in : inputs) {
        io.inputs.push_back(std::span(reinterpret_cast<const uint8_t*>(in.data()), in.size() * 4));
      }
      for (int64_t n : out_row) {
        outs.emplace_back(static_cast<size_t>(rows * n), NAN);
      }
      for (std::vector<float>& o : outs) {
        io.outputs.push_back(std::span(reinterpret_cast<uint8_t*>(o.data()), o.size() * 4));
      }
      Result<ExecutionTiming> done = backend.Execute(handle, BatchJob{0, size, {io}});
      REQUIRE_MESSAGE(done.ok(), (done.ok() ? "" : done.error().message));
      return outs;
    };
    std::vector<std::vector<float>> got = run(fast, f), want = run(reference, r);
    for (size_t o = 0; o < got.size(); ++o) {
      CAPTURE(o);
      double diff = 0, scale = 0;
      for (size_t i = 0; i < want[o].size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got[o][i]) - want[o][i]));
        scale = std::max(scale, std::abs(static_cast<double>(want[o][i])));
      }
      CHECK(scale > 0);
      CHECK_MESSAGE(diff <= 1e-5 * scale, "max difference " << diff << " at scale " << scale);
    }
  }
}

TEST_CASE("blocked layouts: every reader of a blocked tensor sees the reference's values") {
  testing::TempDir dir;
  CheckFastMatchesReference(LayoutBundle(dir), {3 * 8 * 8}, {8 * 4 * 4, 8, 24 * 8 * 8});
}

// q [N, 2, 4, 3] x k [N, 2, 3, 4] three times: scaled, masked (a broadcast [N, 1, 1, 4]
// tensor) and shifted the other way round (not fused: sub does not commute); scaled and added
// to the product, which the add reads too (not fused); scaled into a model output (the chain stops
// there); scaled by a weight that comes first, alone (fused).
std::string AttentionBundle(const testing::TempDir& dir) {
  std::string path = dir.path() + "/attention";
  std::filesystem::create_directory(path);
  std::string text = R"(name = "attention"
[[inputs]]
name = "q"
shape = [-1, 2, 4, 3]
[[inputs]]
name = "k"
shape = [-1, 2, 3, 4]
[[inputs]]
name = "mask"
shape = [-1, 1, 1, 4]
[batching]
sizes = [1, 4]
)";
  for (const char* out : {"f", "g", "d3", "h", "p"}) {
    text += "[[outputs]]\nname = \"" + std::string(out) + "\"\nshape = [-1, 2, 4, 4]\n";
  }
  struct Step {
    const char* op;
    const char* inputs;
    const char* output;
    const char* extra;
  };
  const Step steps[] = {
      {"matmul", R"(["q", "k"])", "s", ""},
      {"div", R"("s")", "d", R"(weight = "scale")"},
      {"add", R"(["d", "mask"])", "e", ""},
      {"sub", R"("e")", "f", "weight = \"shift\"\nreverse = true"},
      {"matmul", R"(["q", "k"])", "s2", ""},
      {"mul", R"("s2")", "m2", "weight = \"w4\"\nreverse = true"},
      {"add", R"(["m2", "s2"])", "g", ""},
      {"matmul", R"(["q", "k"])", "s3", ""},
      {"div", R"("s3")", "d3", R"(weight = "scale")"},
      {"add", R"(["mask", "d3"])", "h", ""},
      {"matmul", R"(["q", "k"])", "s4", ""},
      {"mul", R"("s4")", "p", "weight = \"w4\"\nreverse = true"},
  };
  for (const Step& step : steps) {
    std::string key = step.inputs[0] == '[' ? "inputs" : "input";
    text += "[[program]]\nop = \"" + std::string(step.op) + "\"\n" + key + " = " + step.inputs +
            "\noutput = \"" + step.output + "\"\n" + step.extra + "\n";
  }
  testing::WriteFile(path + "/manifest.toml", text);
  testing::WriteFile(path + "/weights.safetensors",
                     RandomWeights({{"scale", {1}}, {"shift", {4, 4}}, {"w4", {4}}}));
  return path;
}

TEST_CASE("matmul epilogues: fused binary ops match the reference, unfusable ones run apart") {
  testing::TempDir dir;
  CheckFastMatchesReference(AttentionBundle(dir), {2 * 4 * 3, 2 * 3 * 4, 4}, {32, 32, 32, 32, 32});
}

// The ops imported models bring: max pooling in ceil mode (its last window past the input's
// end), both average poolings, the piecewise activations, a concat
// of three computed tensors, two reductions and a log softmax; the concat is also an output.
std::string ImportedOpsBundle(const testing::TempDir& dir) {
  std::string path = dir.path() + "/imported";
  std::filesystem::create_directory(path);
  testing::WriteFile(path + "/manifest.toml", R"(name = "imported"
[[inputs]]
name = "x"
shape = [-1, 4, 6, 6]
[[outputs]]
name = "out"
shape = [-1, 12]
[[outputs]]
name = "f"
shape = [-1, 12, 6, 6]
[[outputs]]
name = "m"
shape = [-1, 4, 3, 3]
[batching]
sizes = [1, 3]
[[program]]
op = "maxpool2d"
input = "x"
output = "m"
kernel = 3
stride = 2
ceil = true
[[program]]
op = "avgpool2d"
input = "x"
output = "a"
kernel = 3
stride = 1
padding = 1
[[program]]
op = "avgpool2d"
input = "x"
output = "b"
kernel = 3
stride = 1
padding = 1
count_pad = true
[[program]]
op = "leaky_relu"
input = "a"
output = "c"
alpha = 0.1
[[program]]
op = "hard_swish"
input = "b"
output = "d"
[[program]]
op = "hard_sigmoid"
input = "x"
output = "e"
alpha = 0.2
beta = 0.5
[[program]]
op = "concat"
inputs = ["c", "d", "e"]
output = "f"
axis = 1
[[program]]
op = "reduce_sum"
input = "f"
output = "g"
axis = 2
[[program]]
op = "reduce_max"
input = "g"
output = "h"
axis = -1
[[program]]
op = "log_softmax"
input = "h"
output = "out"
axis = 1
)");
  testing::WriteFile(path + "/weights.safetensors", testing::SafetensorsBytes("{}", ""));
  return path;
}

TEST_CASE("imported ops: pooling, activations, concat, reductions and log softmax agree") {
  testing::TempDir dir;
  CheckFastMatchesReference(ImportedOpsBundle(dir), {4 * 6 * 6}, {12, 12 * 6 * 6, 4 * 3 * 3});
}

}  // namespace
}  // namespace ferry
