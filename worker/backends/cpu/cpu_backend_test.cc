#include "worker/backends/cpu/cpu_backend.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "model/dtype_convert.h"
#include "tests/testing/temp_dir.h"

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

const CpuMode kModes[] = {CpuMode::kFast, CpuMode::kReference};

TEST_CASE("both CPU modes match PyTorch within 1e-5 on every example, size and variant") {
  for (CpuMode mode : kModes) {
    CAPTURE(mode == CpuMode::kFast ? "fast" : "reference");
    std::vector<Case> cases = {{"mlp", "default", 1}, {"mlp", "default", 8}, {"mlp", "default", 32},
                               {"cnn", "default", 1}, {"cnn", "default", 4}, {"cnn", "large", 1},
                               {"cnn", "large", 4}};
    std::map<std::string, Bundle> bundles;
    CpuBackend backend(CpuOptions{mode, 2});
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
}

TEST_CASE("malformed jobs are refused before any byte is read") {
  for (CpuMode mode : kModes) {
    Bundle bundle = LoadBundle("examples/models/mlp").value();
    CpuBackend backend(CpuOptions{mode, 1});
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
}

TEST_CASE("padding rows do not leak into callers' outputs, and requests are independent") {
  for (CpuMode mode : kModes) {
    CAPTURE(mode == CpuMode::kFast ? "fast" : "reference");
    Bundle bundle = LoadBundle("examples/models/mlp").value();
    CpuBackend backend(CpuOptions{mode, 2});
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
    // Same answer alone or coalesced and padded: bit for bit in reference mode; the fast path
    // may pick another GEMM kernel for another row count, so there within 1e-6 relative.
    double limit = mode == CpuMode::kReference ? 0.0 : 1e-6;
    CHECK(RelativeError(Floats(together_a), Floats(alone)) <= limit);
    CHECK(RelativeError(Floats(together_b), Floats(alone)) > 1e-3);
  }
}

TEST_CASE("released weights refuse batches until restored, then answer as before") {
  for (CpuMode mode : kModes) {
    CAPTURE(mode == CpuMode::kFast ? "fast" : "reference");
    Bundle bundle = LoadBundle("examples/models/mlp").value();
    CpuBackend backend(CpuOptions{mode, 1});
    ModelHandle mlp = backend.Load(bundle).value();
    uint64_t expected = 0;
    for (const TensorInfo& t : bundle.weights.index().tensors) {
      uint64_t n = 1;
      for (int64_t d : t.shape) {
        n *= static_cast<uint64_t>(d);
      }
      expected += n * 4;
    }
    CHECK(backend.SupportsResidency());
    CHECK(backend.WeightBytes(mlp) == expected);
    CHECK(expected > 100'000);  // 784 x 128 floats and more.
    std::vector<float> x(784, 0.5f);
    std::span<const uint8_t> in(reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4);
    std::vector<uint8_t> before(40), after(40);
    REQUIRE(backend.Execute(mlp, BatchJob{0, 1, {{1, {in}, {before}}}}).ok());
    backend.ReleaseWeights(mlp);
    Result<ExecutionTiming> out = backend.Execute(mlp, BatchJob{0, 1, {{1, {in}, {after}}}});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().code == ErrorCode::kUnavailable);
    CHECK(backend.ModelStatus(mlp).ok());  // Out of memory, not failed.
    CHECK(backend.WeightBytes(mlp) == expected);
    REQUIRE(backend.RestoreWeights(mlp).ok());
    REQUIRE(backend.RestoreWeights(mlp).ok());  // Already resident: nothing to do.
    REQUIRE(backend.Execute(mlp, BatchJob{0, 1, {{1, {in}, {after}}}}).ok());
    CHECK(before == after);
    backend.Unload(mlp);
    CHECK(backend.RestoreWeights(mlp).error().code == ErrorCode::kNotFound);
  }
}

// Every (variant, size) of every example, random inputs in uneven requests: the fast path
// against the reference.
TEST_CASE("the fast path matches the reference within 1e-5 on every example, size and variant") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const char* name : {"mlp", "cnn"}) {
    Bundle bundle = LoadBundle(std::string("examples/models/") + name).value();
    CpuBackend fast(CpuOptions{CpuMode::kFast, 2}), reference(CpuOptions{CpuMode::kReference, 2});
    ModelHandle f = fast.Load(bundle).value(), r = reference.Load(bundle).value();
    const Manifest& m = bundle.manifest;
    for (size_t v = 0; v < m.variants.size(); ++v) {
      for (int64_t size : m.batch_sizes) {
        CAPTURE(name);
        CAPTURE(v);
        CAPTURE(size);
        int64_t in_row = RowBytes(m, m.inputs[0], m.variants[v], true);
        int64_t out_row = RowBytes(m, m.outputs[0], m.variants[v], false);
        int64_t rows = std::max<int64_t>(1, size - 1);  // One padding row where possible.
        std::vector<float> input(static_cast<size_t>(rows * in_row / 4));
        for (float& x : input) {
          x = normal(rng);
        }
        auto in_bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(input.data()),
                                                 input.size() * 4);
        std::vector<uint8_t> got(static_cast<size_t>(rows * out_row)), want(got.size());
        auto job_for = [&](std::vector<uint8_t>& out) {
          BatchJob job{static_cast<int>(v), size, {}};
          for (int64_t begin = 0; begin < rows;) {
            int64_t n = std::min<int64_t>(rows - begin, begin % 3 + 1);
            job.requests.push_back({n,
                                    {in_bytes.subspan(begin * in_row, n * in_row)},
                                    {std::span(out).subspan(begin * out_row, n * out_row)}});
            begin += n;
          }
          return job;
        };
        REQUIRE(fast.Execute(f, job_for(got)).ok());
        REQUIRE(reference.Execute(r, job_for(want)).ok());
        double error = RelativeError(Floats(got), Floats(want));
        CHECK_MESSAGE(error <= 1e-5, "relative error " << error);
      }
    }
  }
}

// A bundle: INT64 ids [N, 3] in [0, 3] -> gather from a [4, 2] table -> mean over the ids.
std::string GatherBundle(const testing::TempDir& dir) {
  std::string path = dir.path() + "/bag";
  std::filesystem::create_directory(path);
  testing::WriteFile(path + "/manifest.toml", R"(name = "bag"
[[inputs]]
name = "ids"
dtype = "INT64"
shape = [-1, 3]
range = [0, 3]
[[outputs]]
name = "mean"
shape = [-1, 2]
[batching]
sizes = [2]
[[program]]
op = "gather"
input = "ids"
output = "rows"
weight = "table"
[[program]]
op = "reduce_mean"
input = "rows"
output = "mean"
axis = 1
)");
  std::vector<float> table = {0, 1, 10, 11, 20, 21, 30, 31};
  testing::WriteFile(
      path + "/weights.safetensors",
      testing::SafetensorsBytes(R"({"table":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]}})",
                                std::string_view(reinterpret_cast<const char*>(table.data()), 32)));
  return path;
}

TEST_CASE("INT64 ids through gather and reduce_mean; an id outside the table fails the batch") {
  testing::TempDir dir;
  Result<Bundle> bundle = LoadBundle(GatherBundle(dir));
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  for (CpuMode mode : kModes) {
    CAPTURE(mode == CpuMode::kFast ? "fast" : "reference");
    CpuBackend backend(CpuOptions{mode, 2});
    Result<ModelHandle> handle = backend.Load(*bundle);
    REQUIRE(handle.ok());
    std::vector<int64_t> a = {0, 1, 3}, b = {2, 2, 2};
    std::vector<float> out_a(2), out_b(2);
    auto io = [](std::vector<int64_t>& ids, std::vector<float>& out) {
      return RequestIo{1,
                       {std::span(reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * 8)},
                       {std::span(reinterpret_cast<uint8_t*>(out.data()), out.size() * 4)}};
    };
    Result<ExecutionTiming> run =
        backend.Execute(*handle, BatchJob{0, 2, {io(a, out_a), io(b, out_b)}});
    REQUIRE_MESSAGE(run.ok(), (run.ok() ? "" : run.error().message));
    CHECK(out_a == std::vector<float>{(0 + 10 + 30) / 3.0f, (1 + 11 + 31) / 3.0f});
    CHECK(out_b == std::vector<float>{20, 21});
    // A peer that bypassed the hook host's range check: refused, nothing read past the table.
    for (int64_t bad : {int64_t{4}, int64_t{-1}, (int64_t{1} << 24) + 1, INT64_MAX}) {
      CAPTURE(bad);
      a[1] = bad;
      run = backend.Execute(*handle, BatchJob{0, 2, {io(a, out_a)}});
      REQUIRE_FALSE(run.ok());
      CHECK(run.error().code == ErrorCode::kInvalidArgument);
      CHECK(run.error().message.find("gather: index") != std::string::npos);
    }
  }
}

TEST_CASE("ConvertToFloat32: every input type, integers exact to 2^24, sizes checked") {
  std::vector<float> out(3);
  int64_t i64[] = {-(int64_t{1} << 24), 7, int64_t{1} << 24};
  REQUIRE(ConvertToFloat32(DType::kI64, std::span(reinterpret_cast<const uint8_t*>(i64), 24), out)
              .ok());
  CHECK(out == std::vector<float>{-16777216.0f, 7.0f, 16777216.0f});
  uint8_t flags[] = {0, 1, 255};
  REQUIRE(ConvertToFloat32(DType::kBool, flags, out).ok());
  CHECK(out == std::vector<float>{0, 1, 1});
  REQUIRE(ConvertToFloat32(DType::kU8, flags, out).ok());
  CHECK(out == std::vector<float>{0, 1, 255});
  int8_t signed_bytes[] = {-128, 0, 127};
  REQUIRE(ConvertToFloat32(DType::kI8, std::span(reinterpret_cast<uint8_t*>(signed_bytes), 3), out)
              .ok());
  CHECK(out == std::vector<float>{-128, 0, 127});
  uint16_t halves[] = {0x3c00, 0xc000, 0x7bff};  // F16: 1, -2, 65504.
  REQUIRE(
      ConvertToFloat32(DType::kF16, std::span(reinterpret_cast<uint8_t*>(halves), 6), out).ok());
  CHECK(out == std::vector<float>{1, -2, 65504});
  double doubles[] = {0.5, -1e300, 3};
  REQUIRE(
      ConvertToFloat32(DType::kF64, std::span(reinterpret_cast<uint8_t*>(doubles), 24), out).ok());
  CHECK(out[0] == 0.5f);
  CHECK(std::isinf(out[1]));
  // Lying sizes and unconvertible types are refused.
  CHECK_FALSE(
      ConvertToFloat32(DType::kI64, std::span(reinterpret_cast<const uint8_t*>(i64), 23), out)
          .ok());
  CHECK_FALSE(ConvertToFloat32(DType::kF8E4M3, flags, out).ok());
}

}  // namespace
}  // namespace ferry
