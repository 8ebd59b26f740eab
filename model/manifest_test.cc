#include "model/manifest.h"

#include <doctest/doctest.h>

#include <string>

namespace ferry {
namespace {

const std::string kHead = R"(
name = "m"
version = 3
[[inputs]]
name = "x"
dtype = "FP32"
shape = [-1, 4]
[[outputs]]
name = "y"
dtype = "FP32"
shape = [-1, 4]
[batching]
sizes = [1, 8]
)";

const std::string kRelu = R"(
[[program]]
op = "relu"
input = "x"
output = "y"
)";

std::string ErrorOf(const std::string& text) {
  Result<Manifest> result = ParseManifest(text, "manifest.toml");
  REQUIRE_FALSE(result.ok());
  return result.error().message;
}

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST_CASE("a manifest is parsed into interface, sizes, variants, program and hooks") {
  Result<Manifest> m = ParseManifest(kHead + kRelu + R"(
[[variants]]
name = "wide"
inputs = { x = [-1, 8] }
outputs = { y = [-1, 8] }
[hooks]
plugin = "hook.so"
preserves_rows = false
)",
                                     "manifest.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  CHECK(m->name == "m");
  CHECK(m->version == 3);
  CHECK(m->inputs[0].batch_axis == 0);
  CHECK(m->inputs[0].At(8) == Shape{8, 4});
  CHECK(m->batch_sizes == std::vector<int64_t>{1, 8});
  REQUIRE(m->variants.size() == 2);
  CHECK(m->variants[0].name == "default");
  CHECK(m->variants[1].inputs.at("x") == Shape{-1, 8});
  CHECK(m->program.size() == 1);
  CHECK(m->program[0].kind == OpKind::kRelu);
  CHECK(m->hooks.plugin == "hook.so");
  CHECK_FALSE(m->hooks.preserves_rows);
  CHECK(m->all_batched());
  CHECK_FALSE(m->unbatched());
}

TEST_CASE("an input without a batch marker has no batch axis") {
  std::string text = kHead + kRelu;
  text.replace(text.find("[-1, 4]"), 7, "[2, 4]");
  text.replace(text.find("[-1, 4]"), 7, "[2, 4]");
  Result<Manifest> m = ParseManifest(text, "manifest.toml");
  REQUIRE(m.ok());
  CHECK_FALSE(m->inputs[0].batch_axis.has_value());
  CHECK_FALSE(m->all_batched());
}

TEST_CASE("structural errors name the file, position and key path") {
  CHECK(Contains(ErrorOf(kHead + R"(
[[program]]
op = "relu6"
input = "x"
output = "y"
)"),
                 "program[0].op: unknown op 'relu6'; did you mean 'relu'?"));
  CHECK(Contains(ErrorOf(kHead + R"(
[[program]]
op = "relu"
input = "nope"
output = "y"
)"),
                 "op 0 (relu) reads 'nope', which no input or earlier op defines"));
  CHECK(Contains(ErrorOf(kHead + R"(
[[program]]
op = "relu"
input = "x"
output = "z"
)"),
                 "output 'y' is not produced by the program"));
  CHECK(Contains(ErrorOf(kHead + R"(
[[program]]
op = "relu"
input = "x"
output = "y"
axis = 1
)"),
                 "program[0].axis: unknown key"));
  CHECK(Contains(ErrorOf(kHead + kRelu +
                         "[[program]]\nop = \"relu\"\ninput = \"x\"\n"
                         "output = \"y\"\n"),
                 "op 1 redefines tensor 'y'"));
}

TEST_CASE("shapes, sizes, dtypes and hooks are checked") {
  std::string bad_shape = kHead + kRelu;
  bad_shape.replace(bad_shape.find("[-1, 4]"), 7, "[-1, -1]");
  CHECK(Contains(ErrorOf(bad_shape), "inputs[0].shape: more than one -1"));
  std::string zero = kHead + kRelu;
  zero.replace(zero.find("[-1, 4]"), 7, "[-1, 0]");
  CHECK(Contains(ErrorOf(zero), "dimensions must be positive"));
  std::string sizes = kHead + kRelu;
  sizes.replace(sizes.find("[1, 8]"), 6, "[8, 1]");
  CHECK(Contains(ErrorOf(sizes), "batching.sizes: expected strictly ascending"));
  std::string unbatched = kHead + kRelu;
  unbatched.replace(unbatched.find("[1, 8]"), 6, "[0]");
  CHECK(Contains(ErrorOf(unbatched), "cannot mark a batch dimension"));
  std::string dtype = kHead + kRelu;
  dtype.replace(dtype.find("FP32"), 4, "FLOAT");
  CHECK(Contains(ErrorOf(dtype), "inputs[0].dtype: unknown dtype 'FLOAT'"));
  CHECK(Contains(ErrorOf(kHead + kRelu + "[hooks]\nplugin = \"../../etc/evil.so\"\n"),
                 "hooks.plugin: must be a relative path inside the bundle"));
  CHECK(Contains(ErrorOf(kHead + kRelu + "[[variants]]\nname = \"v\"\ninputs = { x = [4, -1] }\n"),
                 "must keep the batch dimension"));
  CHECK(Contains(ErrorOf("name = \"m\"\n"), "inputs: at least one"));
  CHECK(Contains(ErrorOf("name = [\n"), "TOML syntax error"));
}

TEST_CASE("all structural errors are reported at once") {
  std::string message = ErrorOf(R"(
name = ""
version = 0
precision = "fp8"
)");
  CHECK(Contains(message, "name: missing or invalid model name"));
  CHECK(Contains(message, "version: must be >= 1"));
  CHECK(Contains(message, "precision: unknown value 'fp8'"));
  CHECK(Contains(message, "batching: missing"));
  CHECK(Contains(message, "program: missing"));
}

}  // namespace
}  // namespace ferry
