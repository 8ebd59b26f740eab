// Hostile files, one class at a time (issue: every file ferry reads is rejected cleanly, in
// bounded time and memory). Inputs are generated here at the sizes that broke the readers:
// nesting far past any limit, tens of thousands of tensors, FIFOs, symlinks, overflowing
// shapes. Each must come back as an error naming the place and the rule, never a crash or
// a hang; the CTest timeout bounds the time.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "config/node_config.h"
#include "model/bundle.h"
#include "tests/testing/temp_dir.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/weight_cache.h"

namespace ferry {
namespace {

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

std::string Repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) {
    out += s;
  }
  return out;
}

std::string NodeError(const std::string& text) {
  Result<NodeConfig> c = ParseNodeConfig(text, "node.toml", "/tmp", {});
  REQUIRE_MESSAGE(!c.ok(), text.substr(0, 200));
  return c.error().message;
}

std::string SafetensorsWith(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

std::string StError(const std::string& file) {
  Result<SafetensorsIndex> r = ParseSafetensors(
      std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size()), "w.safetensors");
  REQUIRE(!r.ok());
  return r.error().message;
}

const char* kReshapeOnly = R"(name = "shape"
[[inputs]]
name = "x"
dtype = "FP32"
shape = [-1, 4, 6]
[[outputs]]
name = "y"
dtype = "FP32"
shape = [-1, 24]
[batching]
sizes = [1, 4]
[[program]]
op = "reshape"
input = "x"
shape = [24]
output = "y"
)";

std::string MakeBundle(const testing::TempDir& dir, const std::string& name,
                       const std::string& manifest, const std::string& weights) {
  std::string root = dir / name;
  testing::WriteFile(root + "/manifest.toml", manifest);
  testing::WriteFile(root + "/weights.safetensors", weights);
  return root;
}

std::string BundleError(const std::string& root) {
  Result<Bundle> b = LoadBundle(root);
  REQUIRE(!b.ok());
  return b.error().message;
}

TEST_CASE("TOML nested far past the limit is refused before toml++ recurses") {
  std::string deep_key = "a" + Repeat(".a", 100000) + " = 1\n";
  std::string e = NodeError(deep_key);
  CHECK(Contains(e, "node.toml:1:"));
  CHECK(Contains(e, "nesting deeper than 32"));
  CHECK(Contains(NodeError("[" + Repeat("a.", 100000) + "a]\n"), "nesting deeper than 32"));
  CHECK(Contains(NodeError("x = " + Repeat("[", 100000) + Repeat("]", 100000) + "\n"),
                 "nesting deeper than 32"));
  CHECK(Contains(NodeError("x = " + Repeat("{a=", 100000) + "1" + Repeat("}", 100000)),
                 "nesting deeper than 32"));
  // At the limit it parses (and then fails only on the unknown key); floats and quoted dots
  // are not nesting.
  std::string at_limit = "[node]\n" + std::string("x") + Repeat(".x", 31) + " = 1\n";
  CHECK(!Contains(NodeError(at_limit), "nesting"));
  std::string over = "[node]\n" + std::string("x") + Repeat(".x", 32) + " = 1\n";
  CHECK(Contains(NodeError(over), "node.toml:2:"));
  // Levels add up: 16 key parts leading into 17 nested inline tables exceed 32.
  CHECK(Contains(
      NodeError("a" + Repeat(".a", 15) + " = " + Repeat("{b=", 17) + "1" + Repeat("}", 17) + "\n"),
      "nesting deeper than 32"));
  // A multi-line string closed by 4 or 5 quotes does not hide what follows it.
  for (const char* string : {"\"\"\"x\"\"\"\"", "\"\"\"x\"\"\"\"\"", "'''x''''", "\"\\\"\""}) {
    CAPTURE(string);
    CHECK(Contains(NodeError(std::string("s = ") + string + "\n" + deep_key), "nesting"));
  }
  std::string floats =
      "[node]\nx = [" + Repeat("1.5, ", 1000) + "2.5] # a.b.c\ny = \"" + Repeat(".", 1000) + "\"\n";
  CHECK(!Contains(NodeError(floats), "nesting"));
}

TEST_CASE("safetensors: deep JSON, duplicate keys and tensor counts are refused while parsing") {
  std::string deep = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + Repeat("[", 100000) +
                     Repeat("]", 100000) + "],\"data_offsets\":[0,0]}}";
  CHECK(Contains(StError(SafetensorsWith(deep)), "JSON nested deeper than 4 levels"));
  CHECK(Contains(StError(SafetensorsWith(
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[[1]],\"data_offsets\":[0,4]}}", "abcd")),
                 "shape holds a array, not a non-negative integer"));
  CHECK(Contains(StError(SafetensorsWith("{\"a\":{},\"a\":{}}")), "duplicate key 'a'"));
  // 30,000 tensors parse in linear time (this took 18 s with the callback parser).
  std::string header = "{";
  for (int i = 0; i < 30000; ++i) {
    header += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
              "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" + std::to_string(4 * i) +
              "," + std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  std::string file = SafetensorsWith(header, std::string(4 * 30000, '\0'));
  Result<SafetensorsIndex> many = ParseSafetensors(
      std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size()), "many");
  REQUIRE(many.ok());
  CHECK(many->tensors.size() == 30000);
  CHECK(many->Find("t29999")->begin == 4 * 29999);
  std::string too_many = "{";
  for (size_t i = 0; i <= kSafetensorsMaxTensors; ++i) {
    too_many += (i ? "," : "") + std::string("\"") + std::to_string(i) + "\":0";
  }
  CHECK(Contains(StError(SafetensorsWith(too_many + "}")), "more than 100000 tensors"));
}

TEST_CASE("a FIFO or a symlink as a bundle file is refused without blocking") {
  testing::TempDir dir;
  std::string root = MakeBundle(dir, "shape", kReshapeOnly, SafetensorsWith("{}"));
  std::filesystem::remove(root + "/weights.safetensors");
  REQUIRE(::mkfifo((root + "/weights.safetensors").c_str(), 0600) == 0);
  CHECK(Contains(BundleError(root), "weights.safetensors: not a regular file"));
  std::filesystem::remove(root + "/weights.safetensors");
  testing::WriteFile(dir / "elsewhere.safetensors", SafetensorsWith("{}"));
  std::filesystem::create_symlink(dir / "elsewhere.safetensors", root + "/weights.safetensors");
  CHECK(Contains(BundleError(root), "is a symlink"));
  // A node file that is a FIFO.
  REQUIRE(::mkfifo((dir / "node.toml").c_str(), 0600) == 0);
  Result<NodeConfig> c = LoadNodeConfig(dir / "node.toml", {});
  REQUIRE(!c.ok());
  CHECK(Contains(c.error().message, "not a regular file"));
}

TEST_CASE("shapes that overflow or have no dimensions are refused by shape inference") {
  testing::TempDir dir;
  std::string w = SafetensorsWith("{}");
  std::string rank0 = kReshapeOnly;
  rank0.replace(rank0.find("shape = [-1, 4, 6]"), 18, "shape = []");
  rank0.replace(rank0.find("sizes = [1, 4]"), 14, "sizes = [0]");
  rank0.replace(rank0.find("shape = [-1, 24]"), 16, "shape = [24]");
  CHECK(Contains(BundleError(MakeBundle(dir, "shape", rank0, w)),
                 "op 0 (reshape) tensor 'x': cannot reshape a tensor of rank 0"));
  std::string huge = kReshapeOnly;
  huge.replace(huge.find("shape = [-1, 4, 6]"), 18, "shape = [-1, 2147483648, 2147483648]");
  std::filesystem::remove_all(dir / "shape");
  CHECK(Contains(BundleError(MakeBundle(dir, "shape", huge, w)),
                 "input 'x' [1, 2147483648, 2147483648] has more than 2^40 elements"));
}

TEST_CASE("manifest garbage that used to pass is named") {
  auto manifest_error = [](const std::string& text) {
    Result<Manifest> m = ParseManifest(text, "manifest.toml");
    REQUIRE_MESSAGE(!m.ok(), text);
    return m.error().message;
  };
  std::string base = kReshapeOnly;
  std::string no_outputs = base;
  no_outputs.replace(
      no_outputs.find("[[outputs]]"),
      std::string("[[outputs]]\nname = \"y\"\ndtype = \"FP32\"\nshape = [-1, 24]\n").size(), "");
  no_outputs.insert(no_outputs.find("[[inputs]]"), "outputs = []\n");  // At the root.
  CHECK(Contains(manifest_error(no_outputs), "at least one [[outputs]] is required"));
  std::string dense = base;
  dense.replace(dense.find("op = \"reshape\""), 14, "op = \"dense\"\nweight = \"w\"\nbias = \"\"");
  CHECK(Contains(manifest_error(dense), "bias: must name a weight tensor"));
  CHECK(Contains(manifest_error(base + "[hooks]\nplugin = \"a\\u0000b.so\"\n"),
                 "without '..' or NUL"));
  // variants x sizes x ops over the limit (each count within its own).
  std::string big = base;
  std::string sizes = "sizes = [";
  for (int i = 1; i <= 64; ++i) {
    sizes += (i > 1 ? ", " : "") + std::to_string(i);
  }
  big.replace(big.find("sizes = [1, 4]"), 14, sizes + "]");
  big += Repeat("[[program]]\nop = \"relu\"\ninput = \"x\"\noutput = \"y\"\n", 1);
  for (int v = 0; v < 4; ++v) {
    big += "[[variants]]\nname = \"v" + std::to_string(v) + "\"\n";
  }
  std::string ops;  // 4094 + the reshape and relu above: exactly the 4096-op limit.
  for (int i = 0; i < 4094; ++i) {
    ops += "[[program]]\nop = \"relu\"\ninput = \"x\"\noutput = \"r" + std::to_string(i) + "\"\n";
  }
  CHECK(Contains(manifest_error(big + ops), "variants x compiled sizes x ops = "));
  CHECK(Contains(manifest_error(big + ops + ops), "8190 entries, more than the limit of 4096"));
  // Counts are refused before their entries are read.
  CHECK(Contains(manifest_error(base + Repeat("[[variants]]\n", 100000)),
                 "100000 entries, more than the limit of 63"));
  std::string reshape9 = base;
  reshape9.replace(reshape9.find("shape = [24]"), 12, "shape = [1, 1, 1, 1, 1, 1, 1, 24]");
  CHECK(Contains(manifest_error(reshape9), "at most 7 of them"));
}

TEST_CASE("zero-sized weights, zero-size kernels and a plugin escaping by symlink are refused") {
  testing::TempDir dir;
  // A conv2d whose kernel is 0 x 0.
  std::string text = R"(name = "z"
[[inputs]]
name = "x"
dtype = "FP32"
shape = [-1, 3, 8, 8]
[[outputs]]
name = "y"
dtype = "FP32"
shape = [-1, 4, 9, 9]
[batching]
sizes = [1]
[[program]]
op = "conv2d"
input = "x"
weight = "k"
output = "y"
)";
  std::string w =
      SafetensorsWith("{\"k\":{\"dtype\":\"F32\",\"shape\":[4,3,0,0],\"data_offsets\":[0,0]}}");
  CHECK(Contains(BundleError(MakeBundle(dir, "z", text, w)), "has a zero dimension"));
  // A plugin path that is a symlink leaving the bundle.
  std::string root =
      MakeBundle(dir, "shape", std::string(kReshapeOnly) + "[hooks]\nplugin = \"hook.so\"\n",
                 SafetensorsWith("{}"));
  testing::WriteFile(dir / "evil.so", "x");
  std::filesystem::create_symlink(dir / "evil.so", root + "/hook.so");
  CHECK(Contains(BundleError(root), "is not a regular file inside the bundle"));
}

TEST_CASE("node files: model names, shm_size and listen addresses are checked") {
  for (const char* name : {"\"..\"", "\"a/b\"", "\".\"", "\"a\\u0000b\""}) {
    CAPTURE(name);
    CHECK(Contains(NodeError(std::string("[scheduler.models.") + name + "]\nweight = 1.0\n"),
                   "not a model name"));
  }
  CHECK(Contains(NodeError("[node]\nshm_size = \"2TiB\"\n"), "must be at most 1TiB"));
  CHECK(ParseNodeConfig("[node]\nshm_size = \"1TiB\"\n", "n", "/tmp", {}).ok());
  for (const char* listen :
       {"\"garbage\"", "\":80\"", "\"a b:80\"", "\"::1:80\"", "\"[zz]:80\"", "\"host:80:\""}) {
    CAPTURE(listen);
    CHECK(Contains(NodeError(std::string("[node.listen]\nhttp = ") + listen + "\n"),
                   "expected HOST:PORT"));
  }
  CHECK(ParseNodeConfig("[node.listen]\nhttp = \"[::1]:0\"\ngrpc = \"localhost:1\"\n", "n", "/tmp",
                        {})
            .ok());
}

TEST_CASE("a model without weights loads, is cached without evicting others, and serves") {
  testing::TempDir dir;
  std::string root = MakeBundle(dir, "shape", kReshapeOnly, SafetensorsWith("{}"));
  Result<Bundle> bundle = LoadBundle(root);
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  HostWeightArena arena(1024);
  WeightCache cache(&arena, ResidencyMode::kManaged, 0);
  cache.Register(0, "big", 1024, Residency::kWarm, [](uint64_t) { return OkStatus(); });
  cache.Register(1, "shape", 0, Residency::kOnDemand, [](uint64_t) { return OkStatus(); });
  REQUIRE(cache.LoadAtStart().ok());
  REQUIRE(cache.Acquire(1).ok());
  CHECK(cache.resident(0));  // Not evicted to make room for nothing.
  CHECK(cache.resident(1));
  CHECK(cache.stats().evictions == 0);
  REQUIRE(cache.Compact({0, 1}).ok());
  CHECK(arena.in_use() == 1024);
  CpuBackend cpu;
  ModelHandle h = cpu.Load(*bundle).value();
  std::vector<float> x(24), y(24);
  for (int i = 0; i < 24; ++i) {
    x[static_cast<size_t>(i)] = static_cast<float>(i);
  }
  BatchJob job{0,
               1,
               {{1,
                 {std::span(reinterpret_cast<const uint8_t*>(x.data()), 96)},
                 {std::span(reinterpret_cast<uint8_t*>(y.data()), 96)}}}};
  REQUIRE(cpu.Execute(h, job).ok());
  CHECK(y == x);
}

}  // namespace
}  // namespace ferry
