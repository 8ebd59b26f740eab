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

TEST_CASE("range: an integer input's closed range; refused on floats and when reversed") {
  auto parse = [](const std::string& input) {
    return ParseManifest("name = \"m\"\n[[inputs]]\nname = \"ids\"\n" + input +
                             "shape = [-1, 4]\n[[outputs]]\nname = \"y\"\nshape = [-1, 4, 8]\n"
                             "[batching]\nsizes = [1]\n[[program]]\nop = \"gather\"\n"
                             "input = \"ids\"\noutput = \"y\"\nweight = \"t\"\n",
                         "m.toml");
  };
  Result<Manifest> ok = parse("dtype = \"INT64\"\nrange = [0, 29999]\n");
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  REQUIRE(ok->inputs[0].range.has_value());
  CHECK((*ok->inputs[0].range)[1] == 29999);
  CHECK(ok->program[0].kind == OpKind::kGather);
  CHECK(ok->program[0].weight == "t");
  for (const char* bad :
       {"dtype = \"FP32\"\nrange = [0, 1]\n", "dtype = \"INT64\"\nrange = [5, 1]\n",
        "dtype = \"INT32\"\nrange = [1]\n", "dtype = \"INT32\"\nrange = 3\n"}) {
    CAPTURE(bad);
    Result<Manifest> m = parse(bad);
    REQUIRE_FALSE(m.ok());
    CHECK(m.error().message.find("range") != std::string::npos);
  }
  Result<Manifest> no_table = ParseManifest(
      "name = \"m\"\n[[inputs]]\nname = \"x\"\nshape = [-1, 4]\n[[outputs]]\n"
      "name = \"y\"\nshape = [-1]\n[batching]\nsizes = [1]\n[[program]]\n"
      "op = \"gather\"\ninput = \"x\"\noutput = \"y\"\n[[program]]\n"
      "op = \"reduce_mean\"\ninput = \"y\"\noutput = \"z\"\n",
      "m.toml");
  REQUIRE_FALSE(no_table.ok());
  CHECK(no_table.error().message.find("gather needs the table") != std::string::npos);
  CHECK(no_table.error().message.find("reduce_mean needs the axis") != std::string::npos);
}

TEST_CASE("binary ops take two inputs or an input and a weight; transpose perm; slice a range") {
  auto parse = [](const std::string& ops) {
    return ParseManifest(
        "name = \"m\"\n[[inputs]]\nname = \"x\"\nshape = [-1, 2, 3]\n"
        "[[outputs]]\nname = \"y\"\nshape = [-1, 2, 2]\n[batching]\n"
        "sizes = [1]\n" +
            ops,
        "m.toml");
  };
  Result<Manifest> ok = parse(
      "[[program]]\nop = \"sub\"\ninput = \"x\"\nweight = \"one\"\nreverse = true\n"
      "output = \"a\"\n[[program]]\nop = \"transpose\"\ninput = \"x\"\nperm = [0, 2, 1]\n"
      "output = \"t\"\n[[program]]\nop = \"matmul\"\ninputs = [\"a\", \"t\"]\n"
      "output = \"y\"\n");
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->program[0].kind == OpKind::kSub);
  CHECK(ok->program[0].reverse);
  CHECK(ok->program[0].weight == "one");
  CHECK(ok->program[1].perm == std::vector<int64_t>{0, 2, 1});
  CHECK(ok->program[2].inputs == std::vector<std::string>{"a", "t"});
  Result<Manifest> sliced = parse(
      "[[program]]\nop = \"slice\"\ninput = \"x\"\naxis = 2\nstart = 1\nend = 3\n"
      "output = \"s\"\n[[program]]\nop = \"sqrt\"\ninput = \"s\"\noutput = \"y\"\n");
  REQUIRE_MESSAGE(sliced.ok(), (sliced.ok() ? "" : sliced.error().message));
  CHECK(sliced->program[0].kind == OpKind::kSlice);
  CHECK((sliced->program[0].axis == 2 && sliced->program[0].start == 1 &&
         sliced->program[0].end == 3));
  CHECK(sliced->program[1].kind == OpKind::kSqrt);
  // mul with neither a second input nor a weight; matmul with one input; no perm.
  for (const char* bad : {"[[program]]\nop = \"mul\"\ninput = \"x\"\noutput = \"y\"\n",
                          "[[program]]\nop = \"matmul\"\ninput = \"x\"\noutput = \"y\"\n",
                          "[[program]]\nop = \"transpose\"\ninput = \"x\"\noutput = \"y\"\n",
                          "[[program]]\nop = \"div\"\ninputs = [\"x\", \"x\"]\nreverse = true\n"
                          "output = \"y\"\n",
                          "[[program]]\nop = \"slice\"\ninput = \"x\"\naxis = 1\nstart = 0\n"
                          "output = \"y\"\n",
                          "[[program]]\nop = \"slice\"\ninput = \"x\"\naxis = 1\nstart = -1\n"
                          "end = 1\noutput = \"y\"\n"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse(bad).ok());
  }
}

TEST_CASE("concat takes 2 to 64 inputs; the activations need their constants; avgpool") {
  auto parse = [](const std::string& ops) {
    return ParseManifest(
        "name = \"m\"\n[[inputs]]\nname = \"x\"\nshape = [-1, 2, 4, 4]\n"
        "[[outputs]]\nname = \"y\"\nshape = [-1, 2, 4, 4]\n[batching]\nsizes = [1]\n" +
            ops,
        "m.toml");
  };
  Result<Manifest> ok = parse(
      "[[program]]\nop = \"avgpool2d\"\ninput = \"x\"\nkernel = 3\nstride = 1\npadding = 1\n"
      "count_pad = true\noutput = \"p\"\n[[program]]\nop = \"leaky_relu\"\ninput = \"p\"\n"
      "alpha = 0.25\noutput = \"l\"\n[[program]]\nop = \"hard_sigmoid\"\ninput = \"l\"\n"
      "alpha = 0.2\nbeta = 0.5\noutput = \"h\"\n[[program]]\nop = \"concat\"\n"
      "inputs = [\"p\", \"l\", \"h\"]\naxis = 1\noutput = \"y\"\n");
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->program[0].kind == OpKind::kAvgPool2d);
  CHECK(ok->program[0].count_pad);
  CHECK(ok->program[1].alpha == 0.25);
  CHECK((ok->program[2].alpha == 0.2 && ok->program[2].beta == 0.5));
  CHECK(ok->program[3].inputs == std::vector<std::string>{"p", "l", "h"});
  std::string inputs65 = "\"x\"";
  for (int i = 1; i < 65; ++i) {
    inputs65 += ", \"x\"";
  }
  for (const std::string& bad :
       {std::string("[[program]]\nop = \"concat\"\ninputs = [\"x\"]\naxis = 1\noutput = \"y\"\n"),
        "[[program]]\nop = \"concat\"\ninputs = [" + inputs65 + "]\naxis = 1\noutput = \"y\"\n",
        std::string("[[program]]\nop = \"concat\"\ninputs = [\"x\", \"x\"]\noutput = \"y\"\n"),
        std::string("[[program]]\nop = \"leaky_relu\"\ninput = \"x\"\noutput = \"y\"\n"),
        std::string("[[program]]\nop = \"hard_sigmoid\"\ninput = \"x\"\nalpha = 0.2\n"
                    "output = \"y\"\n"),
        std::string("[[program]]\nop = \"leaky_relu\"\ninput = \"x\"\nalpha = inf\n"
                    "output = \"y\"\n"),
        std::string("[[program]]\nop = \"avgpool2d\"\ninput = \"x\"\noutput = \"y\"\n"),
        std::string("[[program]]\nop = \"reduce_max\"\ninput = \"x\"\noutput = \"y\"\n")}) {
    CAPTURE(bad);
    CHECK_FALSE(parse(bad).ok());
  }
}

TEST_CASE("BYTES only where clients send it to a plugin: hooks.inputs, a pipeline's inputs") {
  const std::string model =
      "name = \"m\"\n[[inputs]]\nname = \"ids\"\ndtype = \"INT64\"\nshape = [-1, 4]\n"
      "[[outputs]]\nname = \"y\"\nshape = [-1, 4]\n[batching]\nsizes = [1]\n"
      "[[program]]\nop = \"relu\"\ninput = \"ids\"\noutput = \"y\"\n";
  Result<Manifest> ok =
      ParseManifest(model +
                        "[hooks]\nplugin = \"t.so\"\n[[hooks.inputs]]\nname = \"text\"\n"
                        "dtype = \"BYTES\"\nshape = [-1]\n",
                    "m.toml");
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->hooks.inputs[0].dtype == DType::kBytes);
  Result<Manifest> pipeline = ParseManifest(
      "name = \"p\"\nkind = \"pipeline\"\n[[inputs]]\nname = \"text\"\ndtype = \"BYTES\"\n"
      "shape = [-1]\n[[outputs]]\nname = \"y\"\nshape = [-1, 4]\n[pipeline]\ncalls = [\"m\"]\n"
      "[hooks]\nplugin = \"p.so\"\n",
      "p.toml");
  REQUIRE_MESSAGE(pipeline.ok(), (pipeline.ok() ? "" : pipeline.error().message));
  std::string as_input = model;
  as_input.replace(as_input.find("INT64"), 5, "BYTES");
  std::string as_output = model;
  as_output.replace(as_output.find("shape = [-1, 4]\n[batching]"), 0, "dtype = \"BYTES\"\n");
  const std::string hook_output =
      model +
      "[hooks]\nplugin = \"t.so\"\n[[hooks.outputs]]\nname = \"label\"\n"
      "dtype = \"BYTES\"\nshape = [-1]\n";
  for (const std::string& bad : {as_input, as_output, hook_output}) {
    Result<Manifest> refused = ParseManifest(bad, "m.toml");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("is BYTES, which only clients send, to a plugin") !=
          std::string::npos);
  }
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
                 "a variant must keep the batch dimension where the tensor declares it"));
  CHECK(Contains(ErrorOf("name = \"m\"\n"), "inputs: at least one"));
  CHECK(Contains(ErrorOf("name = [\n"), "TOML syntax error"));
}

TEST_CASE("clip needs finite min <= max; conv2d groups is at least 1") {
  auto clip = [](const std::string& bounds) {
    return kHead + "[[program]]\nop = \"clip\"\ninput = \"x\"\noutput = \"y\"\n" + bounds;
  };
  Result<Manifest> ok = ParseManifest(clip("min = 0\nmax = 6.0\n"), "manifest.toml");
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->program[0].kind == OpKind::kClip);
  CHECK(ok->program[0].max == 6.0);
  CHECK(ParseManifest(clip("min = 1.5\nmax = 1.5\n"), "manifest.toml").ok());
  CHECK(Contains(ErrorOf(clip("min = 2\nmax = 1\n")), "clip needs min <= max"));
  CHECK(Contains(ErrorOf(clip("min = 0\n")), "clip needs min <= max"));
  CHECK(Contains(ErrorOf(clip("min = 0\nmax = 1e39\n")), "program[0].max"));
  std::string conv = kHead +
                     "[[program]]\nop = \"conv2d\"\ninput = \"x\"\noutput = \"y\"\n"
                     "weight = \"w\"\ngroups = 0\n";
  CHECK(Contains(ErrorOf(conv), "program[0].groups"));
}

TEST_CASE("a tensor's name is letters, digits, '_', '-' and '.'") {
  for (const char* bad : {"a b", "a/b", "x:0"}) {
    CAPTURE(bad);
    std::string text = kHead + kRelu;
    text.replace(text.find("name = \"x\""), 10, "name = \"" + std::string(bad) + "\"");
    CHECK(Contains(ErrorOf(text), "inputs[0].name: '" + std::string(bad) +
                                      "': use letters, digits, '_', '-', '.'"));
  }
}

TEST_CASE("a tensor declared twice is reported, and its other mistakes too") {
  std::string twice = kHead + kRelu;
  twice.replace(twice.find("[[outputs]]"), 0,
                "[[inputs]]\nname = \"x\"\ndtype = \"FLOAT\"\nshape = [-1, 4]\n");
  std::string message = ErrorOf(twice);
  CHECK(Contains(message, "inputs[1].name: 'x' is declared twice"));
  CHECK(Contains(message, "inputs[1].dtype: unknown dtype 'FLOAT'"));
}

TEST_CASE("an input and an output may not share a name") {
  // The program reads x and writes x: without the rule the manifest would pass, since the op's
  // output is declared and produced.
  std::string same = kHead + kRelu;
  same.replace(same.find("name = \"y\""), 10, "name = \"x\"");
  same.replace(same.find("output = \"y\""), 12, "output = \"x\"");
  CHECK(Contains(ErrorOf(same), "outputs: 'x' is both an input and an output"));
}

TEST_CASE("hooks: the plugin's config and the tensors clients send and receive") {
  const std::string hooks = R"(
[hooks]
plugin = "image.so"
config = "mean = 0.5"
[[hooks.inputs]]
name = "image"
dtype = "UINT8"
shape = [-1, 2, 2, 4]
[[hooks.outputs]]
name = "labels"
dtype = "INT64"
shape = [-1, 3]
)";
  Result<Manifest> m = ParseManifest(kHead + kRelu + hooks, "manifest.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  CHECK(m->hooks.config == "mean = 0.5");
  REQUIRE(m->client_inputs().size() == 1);
  CHECK(m->client_inputs()[0].name == "image");
  CHECK(m->client_inputs()[0].dtype == DType::kU8);
  CHECK(m->client_inputs()[0].batch_axis == 0);
  CHECK(m->client_outputs()[0].name == "labels");
  CHECK(m->inputs[0].name == "x");  // The model's own stay as declared.
  // Without hook tensors, clients see the model's.
  Result<Manifest> plain = ParseManifest(kHead + kRelu, "manifest.toml");
  REQUIRE(plain.ok());
  CHECK(&plain->client_inputs() == &plain->inputs);
  CHECK(&plain->client_outputs() == &plain->outputs);
  // Client tensors without a plugin to produce them are refused.
  std::string no_plugin = hooks;
  no_plugin.erase(no_plugin.find("plugin = \"image.so\"\n"), 19);
  CHECK(Contains(ErrorOf(kHead + kRelu + no_plugin), "hooks.inputs: client tensors differ"));
  // Config at the limit is accepted, one byte more refused.
  std::string at_limit(kMaxHookConfigBytes, 'c');
  CHECK(ParseManifest(kHead + kRelu + "[hooks]\nplugin = \"p.so\"\nconfig = \"" + at_limit + "\"\n",
                      "manifest.toml")
            .ok());
  CHECK(Contains(
      ErrorOf(kHead + kRelu + "[hooks]\nplugin = \"p.so\"\nconfig = \"" + at_limit + "c\"\n"),
      "hooks.config: longer than 65536 bytes"));
  // Hook tensors are checked like the model's.
  std::string bad = hooks;
  bad.replace(bad.find("UINT8"), 5, "TEXT");
  CHECK(Contains(ErrorOf(kHead + kRelu + bad), "hooks.inputs[0].dtype: unknown dtype 'TEXT'"));
}

TEST_CASE("all structural errors are reported at once") {
  std::string message = ErrorOf(R"(
name = ""
version = 0
precision = "fp8"
)");
  CHECK(Contains(message, "name: missing or invalid model name"));
  CHECK(Contains(message, "version: must be"));
  CHECK(Contains(message, "precision: unknown value 'fp8'"));
  CHECK(Contains(message, "batching: missing"));
  CHECK(Contains(message, "program: missing"));
}

std::string MaxPool(const std::string& kernel, const std::string& padding) {
  return "\n[[program]]\nop = \"maxpool2d\"\ninput = \"x\"\noutput = \"y\"\nkernel = " + kernel +
         "\npadding = " + padding + "\n";
}

TEST_CASE("maxpool padding may be half the kernel in each dimension, not more") {
  CHECK(ParseManifest(kHead + MaxPool("[2, 2]", "[1, 1]"), "m.toml").ok());  // Exactly half.
  CHECK(Contains(ErrorOf(kHead + MaxPool("[3, 3]", "[2, 0]")), "must be at most half the kernel"));
  CHECK(Contains(ErrorOf(kHead + MaxPool("[3, 3]", "[0, 2]")), "must be at most half the kernel"));
}

TEST_CASE("a batching table whose sizes are malformed is not also reported missing") {
  std::string head = kHead.substr(0, kHead.find("[batching]"));
  std::string message = ErrorOf(head + "[batching]\nsizes = \"eight\"\n" + kRelu);
  CHECK(Contains(message, "batching.sizes"));
  CHECK_FALSE(Contains(message, "missing compiled batch sizes"));
  CHECK(Contains(ErrorOf(head + "[batching]\n" + kRelu), "missing compiled batch sizes"));
}

TEST_CASE("an undefined operand is reported at the key that names it") {
  std::string add = "\n[[program]]\nop = \"add\"\ninputs = [\"x\", \"nope\"]\noutput = \"y\"\n";
  CHECK(Contains(ErrorOf(kHead + add), "program[0].inputs: op 0 (add) reads 'nope'"));
  std::string relu = "\n[[program]]\nop = \"relu\"\ninput = \"nope\"\noutput = \"y\"\n";
  CHECK(Contains(ErrorOf(kHead + relu), "program[0].input: op 0 (relu) reads 'nope'"));
}

std::string Inputs(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out +=
        "[[inputs]]\nname = \"in" + std::to_string(i) + "\"\ndtype = \"FP32\"\nshape = [-1, 4]\n";
  }
  return out;
}

TEST_CASE("at most 64 inputs: the 65th is refused before any is read") {
  std::string tail =
      "[[outputs]]\nname = \"y\"\ndtype = \"FP32\"\nshape = [-1, 4]\n"
      "[batching]\nsizes = [1]\n[[program]]\nop = \"relu\"\ninput = \"in0\"\n"
      "output = \"y\"\n";
  std::string message = ErrorOf("name = \"m\"\n" + Inputs(65) + tail);
  CHECK(Contains(message, "inputs: 65 entries, more than the limit of 64"));
  CHECK_FALSE(Contains(message, "in64"));  // None was read.
  CHECK(ParseManifest("name = \"m\"\n" + Inputs(64) + tail, "m.toml").ok());
}

TEST_CASE("a malformed shape is reported once, not also as missing; top-level keys are checked") {
  std::string bad = kHead;
  bad.replace(bad.find("shape = [-1, 4]"), 15, "shape = \"wide\"");
  std::string message = ErrorOf(bad + kRelu);
  CHECK(Contains(message, "inputs[0].shape"));
  CHECK_FALSE(Contains(message, "missing (a list of dimensions"));
  // Before any table header: a top-level key (after one it would belong to that table).
  std::string message_top = ErrorOf("bogus = 1\n" + kHead + kRelu);
  CHECK(Contains(message_top, "bogus: unknown key"));
  CHECK_FALSE(Contains(message_top, "program[0].bogus"));
}

TEST_CASE("a tensor without a dtype is FP32") {
  std::string head = kHead;
  head.erase(head.find("dtype = \"FP32\"\n"), 15);  // The input's.
  Result<Manifest> m = ParseManifest(head + kRelu, "m.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  CHECK(m->inputs[0].dtype == DType::kF32);
}

const std::string kPipeline = R"(
name = "p"
kind = "pipeline"
[[inputs]]
name = "x"
dtype = "UINT8"
shape = [-1, 4]
[[outputs]]
name = "y"
dtype = "FP32"
shape = [-1, 2]
[pipeline]
calls = ["a", "b"]
[hooks]
plugin = "p.so"
config = "k=1"
)";

TEST_CASE("a pipeline: its interface, the models it calls, its plugin; no program") {
  Result<Manifest> m = ParseManifest(kPipeline, "manifest.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  CHECK(m->pipeline());
  CHECK(m->calls == std::vector<std::string>{"a", "b"});
  CHECK(m->hooks.plugin == "p.so");
  CHECK(m->program.empty());
  CHECK(m->batch_sizes.empty());
  REQUIRE(m->variants.size() == 1);  // "default": what metadata describes.
  CHECK(m->variants[0].inputs.at("x") == Shape{-1, 4});
  CHECK(m->client_inputs()[0].dtype == DType::kU8);
  // A model is the default kind; a [pipeline] table in a model is an unknown key.
  CHECK_FALSE(ParseManifest(kHead + kRelu, "m")->pipeline());
  CHECK(Contains(ErrorOf(kHead + kRelu + "[pipeline]\ncalls = [\"a\"]\n"), "pipeline"));
  CHECK(Contains(ErrorOf(R"(kind = "graph")" + kHead + kRelu), "kind"));
}

TEST_CASE("a pipeline's mistakes: each named at its key") {
  auto with = [](const std::string& from, const std::string& to) {
    std::string text = kPipeline;
    size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return ErrorOf(text.replace(at, from.size(), to));
  };
  CHECK(Contains(with("calls = [\"a\", \"b\"]", "calls = []"), "pipeline.calls: expected 1 to 16"));
  CHECK(Contains(with("calls = [\"a\", \"b\"]", "calls = [\"p\"]"), "cannot call itself"));
  CHECK(Contains(with("calls = [\"a\", \"b\"]", "calls = [\"a\", \"a\"]"), "'a' is listed twice"));
  CHECK(Contains(with("calls = [\"a\", \"b\"]", "calls = [\"../x\"]"), "not a valid model name"));
  CHECK(Contains(with("[pipeline]\ncalls = [\"a\", \"b\"]\n", ""), "missing [pipeline] calls"));
  CHECK(Contains(with("plugin = \"p.so\"\n", ""), "a pipeline needs [hooks] plugin"));
  CHECK(
      Contains(with("[hooks]", "[batching]\nsizes = [1]\n[hooks]"), "a pipeline has no batching"));
  CHECK(Contains(
      with("[hooks]", "[[program]]\nop = \"relu\"\ninput = \"x\"\noutput = \"y\"\n[hooks]"),
      "a pipeline has no program"));
  CHECK(Contains(with("config = \"k=1\"", "preserves_rows = false"), "hooks.preserves_rows"));
  CHECK(Contains(with("config = \"k=1\"", "[[hooks.inputs]]\nname = \"z\"\nshape = [-1]"),
                 "a pipeline's clients send its [[inputs]]"));
  std::string many = "calls = [";
  for (int i = 0; i < 17; ++i) many += "\"m" + std::to_string(i) + "\", ";
  CHECK(Contains(with("calls = [\"a\", \"b\"]", many + "]"), "expected 1 to 16"));
}

}  // namespace
}  // namespace ferry
