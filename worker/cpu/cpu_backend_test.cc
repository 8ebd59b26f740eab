#include "worker/cpu/cpu_backend.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace ferry {
namespace {

std::vector<float> Floats(std::span<const uint8_t> bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// max |a - b| / max |b|: the error relative to the output's scale.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

struct Case {
  std::string model;
  std::string variant;
  int64_t size;
};

TEST_CASE("the CPU backend matches PyTorch within 1e-5 on every example, size and variant") {
  std::vector<Case> cases = {{"mlp", "default", 1}, {"mlp", "default", 8}, {"mlp", "default", 32},
                             {"cnn", "default", 1}, {"cnn", "default", 4}, {"cnn", "large", 1},
                             {"cnn", "large", 4}};
  std::map<std::string, Bundle> bundles;
  CpuBackend backend(2);
  std::map<std::string, ModelHandle> handles;
  for (const char* name : {"mlp", "cnn"}) {
    Result<Bundle> bundle = LoadBundle(std::string("examples/models/") + name);
    REQUIRE(bundle.ok());
    auto [it, unused] = bundles.emplace(name, std::move(*bundle));
    handles[name] = backend.Load(it->second).value();
  }
  for (const Case& c : cases) {
    CAPTURE(c.model);
    CAPTURE(c.variant);
    CAPTURE(c.size);
    std::string path = "tests/data/reference/" + c.model + "-" + c.variant + "-b" +
                       std::to_string(c.size) + ".safetensors";
    Result<SafetensorsFile> fixture = SafetensorsFile::Open(path);
    REQUIRE_MESSAGE(fixture.ok(), path);
    const Manifest& manifest = bundles.at(c.model).manifest;
    int variant = 0;
    for (size_t v = 0; v < manifest.variants.size(); ++v) {
      if (manifest.variants[v].name == c.variant) {
        variant = static_cast<int>(v);
      }
    }
    std::span<const uint8_t> input =
        fixture->Data(*fixture->index().Find("input." + manifest.inputs[0].name));
    const TensorInfo* want_info = fixture->index().Find("output." + manifest.outputs[0].name);
    std::vector<float> want = Floats(fixture->Data(*want_info));
    // Split the rows over requests (1 row, then the rest) so coalescing is exercised too,
    // and run at the compiled size that fits (padding when it is larger).
    int64_t compiled =
        *std::lower_bound(manifest.batch_sizes.begin(), manifest.batch_sizes.end(), c.size);
    std::vector<uint8_t> output(want.size() * 4);
    size_t in_row = input.size() / static_cast<size_t>(c.size);
    size_t out_row = output.size() / static_cast<size_t>(c.size);
    BatchJob job{variant, compiled, {}};
    for (int64_t begin = 0; begin < c.size;) {
      int64_t rows = begin == 0 ? 1 : c.size - begin;
      job.requests.push_back({rows,
                              {input.subspan(begin * in_row, rows * in_row)},
                              {std::span(output).subspan(begin * out_row, rows * out_row)}});
      begin += rows;
    }
    Result<ExecutionTiming> timing = backend.Execute(handles[c.model], job);
    REQUIRE_MESSAGE(timing.ok(), (timing.ok() ? "" : timing.error().message));
    CHECK(timing->compute_seconds > 0);
    CHECK(timing->load_seconds == 0);
    double error = RelativeError(Floats(output), want);
    CHECK_MESSAGE(error <= 1e-5, "relative error " << error);
  }
}

TEST_CASE("malformed jobs are refused before any byte is read") {
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  CpuBackend backend(1);
  ModelHandle mlp = backend.Load(bundle).value();
  std::vector<uint8_t> input(784 * 4), output(10 * 4);
  BatchJob job{0, 1, {{1, {input}, {output}}}};
  CHECK(backend.Execute(mlp, job).ok());
  job.batch_size = 3;
  CHECK(backend.Execute(mlp, job).error().message == "model 'mlp': no compiled batch size 3");
  job.batch_size = 1;
  job.requests[0].inputs[0] = std::span<const uint8_t>(input).first(100);
  CHECK(backend.Execute(mlp, job).error().message.find("input 'input' has 100 bytes") !=
        std::string::npos);
  job.requests[0].inputs[0] = input;
  job.requests.push_back(job.requests[0]);
  CHECK(backend.Execute(mlp, job).error().message.find("do not fit compiled size 1") !=
        std::string::npos);
  CHECK(backend.Execute(7, job).error().code == ErrorCode::kNotFound);
}

TEST_CASE("padding rows do not leak into callers' outputs, and requests are independent") {
  Bundle bundle = LoadBundle("examples/models/mlp").value();
  CpuBackend backend(2);
  ModelHandle mlp = backend.Load(bundle).value();
  std::vector<float> a(784, 0.5f), b(784, -0.25f);
  auto bytes = [](std::vector<float>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
  };
  std::vector<uint8_t> alone(40), together_a(40), together_b(40);
  REQUIRE(backend.Execute(mlp, BatchJob{0, 1, {{1, {bytes(a)}, {alone}}}}).ok());
  REQUIRE(
      backend
          .Execute(mlp,
                   BatchJob{0, 4, {{1, {bytes(b)}, {together_b}}, {1, {bytes(a)}, {together_a}}}})
          .ok());
  CHECK(Floats(together_a) == Floats(alone));  // Same answer alone or coalesced and padded.
  CHECK(Floats(together_b) != Floats(alone));
}

}  // namespace
}  // namespace ferry
