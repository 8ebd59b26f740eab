// The importer on graphs built in code: each supported op's conversion, folding, and every
// class of hostile file (truncated, lying sizes, cycles, escaping external data, huge counts).
#include "model/onnx/onnx_import.h"

#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "model/bundle.h"
#include "model/onnx/converter.h"
#include "model/onnx/test_graphs.h"
#include "tests/testing/temp_dir.h"

namespace ferry::onnx_import {
namespace {

namespace fs = std::filesystem;
using namespace graphs;  // NOLINT: the graph builders.

// x [N, 3] -> Gemm(W [2, 3], transB) -> Relu -> MatMul(V [2, 2]) + b -> Softmax -> y.
onnx::ModelProto Mlp() {
  onnx::ModelProto m = Model({3});
  Init(m, "W", {2, 3}, {1, 2, 3, 4, 5, 6});
  Init(m, "c", {2}, {0.5f, -0.5f});
  Init(m, "V", {2, 2}, {1, 2, 3, 4});
  Init(m, "b", {2}, {10, 20});
  IntAttr(Node(m, "Gemm", {"x", "W", "c"}, "h"), "transB", 1);
  Node(m, "Relu", {"h"}, "r");
  Node(m, "MatMul", {"r", "V"}, "p");
  Node(m, "Add", {"p", "b"}, "q");
  Node(m, "Softmax", {"q"}, "y");
  Output(m, "y");
  return m;
}

TEST_CASE("an MLP imports as dense, relu, dense with its bias folded, softmax") {
  Result<ImportedModel> r = Import(Mlp());
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const Manifest& m = r->manifest;
  REQUIRE(m.program.size() == 4);
  CHECK(m.program[0].kind == OpKind::kDense);
  CHECK(m.program[1].kind == OpKind::kRelu);
  CHECK(m.program[2].kind == OpKind::kDense);
  CHECK(m.program[3].kind == OpKind::kSoftmax);
  CHECK(m.program[3].axis == 1);
  CHECK(m.program[3].output == "y");
  CHECK(m.inputs[0].shape == Shape{kBatchDim, 3});
  CHECK(m.outputs[0].shape == Shape{kBatchDim, 2});
  // transB: W is already [out, in]. MatMul's V [in, out] is transposed to [out, in].
  CHECK(FindWeight(*r, m.program[0].weight)->values == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(FindWeight(*r, m.program[2].weight)->values == std::vector<float>{1, 3, 2, 4});
  CHECK(FindWeight(*r, m.program[2].bias)->values == std::vector<float>{10, 20});
  // The text round-trips through the manifest parser.
  Result<Manifest> parsed = ParseManifest(ManifestToml(m), "manifest.toml");
  REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
  CHECK(parsed->program.size() == 4);
  CHECK(parsed->program[2].bias == m.program[2].bias);
}

TEST_CASE("a written bundle loads, and an existing directory is never overwritten") {
  testing::TempDir dir;
  Result<ImportedModel> r = Import(Mlp());
  REQUIRE(r.ok());
  std::string out = dir.path() + "/m";
  REQUIRE(WriteBundle(*r, out).ok());
  Result<Bundle> bundle = LoadBundle(out);
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  CHECK(bundle->weights.index().tensors.size() == 4);
  CHECK(Contains(WriteBundle(*r, out).error().message, "already exists"));
  CHECK(fs::exists(out + "/manifest.toml"));
}

TEST_CASE("batch normalization folds into the conv before it") {
  onnx::ModelProto m = Model({1, 3, 3});
  Init(m, "w", {2, 1, 1, 1}, {2, 3});
  Init(m, "s", {2}, {1, 2});
  Init(m, "bb", {2}, {0.5f, 1});
  Init(m, "mean", {2}, {1, 2});
  Init(m, "var", {2}, {3, 15});
  Node(m, "Conv", {"x", "w"}, "c");
  onnx::NodeProto* bn = Node(m, "BatchNormalization", {"c", "s", "bb", "mean", "var"}, "n");
  auto* eps = bn->add_attribute();
  eps->set_name("epsilon");
  eps->set_type(onnx::AttributeProto::FLOAT);
  eps->set_f(1.0f);
  Node(m, "Relu", {"n"}, "y");
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  REQUIRE(r->manifest.program.size() == 2);
  const Op& conv = r->manifest.program[0];
  // s = scale / sqrt(var + 1) = {0.5, 0.5}; w' = {1, 1.5}; b' = (0 - mean) s + beta.
  CHECK(FindWeight(*r, conv.weight)->values == std::vector<float>{1, 1.5f});
  CHECK(FindWeight(*r, conv.bias)->values == std::vector<float>{0, 0});
  // A conv output read twice cannot absorb a batch norm: it becomes a 1x1 conv2d of its own
  // with the diagonal weight diag(s).
  Node(m, "Add", {"c", "y"}, "z");
  m.mutable_graph()->mutable_output(0)->set_name("z");
  Result<ImportedModel> unfolded = Import(m);
  REQUIRE_MESSAGE(unfolded.ok(), (unfolded.ok() ? "" : unfolded.error().message));
  REQUIRE(unfolded->manifest.program.size() == 4);
  const Op& diagonal = unfolded->manifest.program[1];
  CHECK(diagonal.kind == OpKind::kConv2d);
  CHECK(FindWeight(*unfolded, unfolded->manifest.program[0].weight)->values ==
        std::vector<float>{2, 3});
  CHECK(FindWeight(*unfolded, diagonal.weight)->values == std::vector<float>{0.5f, 0, 0, 0.5f});
  CHECK(FindWeight(*unfolded, diagonal.bias)->values == std::vector<float>{0, 0});
}

TEST_CASE("a resnet-style block: conv, pool, residual add, global pool, flatten, gemm") {
  onnx::ModelProto m = Model({1, 8, 8});
  Init(m, "w", {4, 1, 3, 3}, std::vector<float>(36, 0.1f));
  Init(m, "w2", {4, 4, 1, 1}, std::vector<float>(16, 0.2f));
  Init(m, "fc", {2, 4}, std::vector<float>(8, 1.0f));
  onnx::NodeProto* conv = Node(m, "Conv", {"x", "w"}, "c");
  IntsAttr(conv, "pads", {1, 1, 1, 1});
  IntsAttr(conv, "strides", {2, 2});
  onnx::NodeProto* pool = Node(m, "MaxPool", {"c"}, "p");
  IntsAttr(pool, "kernel_shape", {3, 3});
  IntsAttr(pool, "pads", {1, 1, 1, 1});
  Node(m, "Conv", {"p", "w2"}, "c2");
  Node(m, "Add", {"c2", "p"}, "a");
  Node(m, "GlobalAveragePool", {"a"}, "g");
  Node(m, "Flatten", {"g"}, "f");
  IntAttr(Node(m, "Gemm", {"f", "fc"}, "y"), "transB", 1);
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const Manifest& man = r->manifest;
  CHECK(man.outputs[0].shape == Shape{kBatchDim, 2});
  CHECK(man.program[0].stride == std::array<int64_t, 2>{2, 2});
  CHECK(man.program[1].kernel == std::array<int64_t, 2>{3, 3});
  CHECK(man.program[1].stride == std::array<int64_t, 2>{1, 1});  // ONNX's default, not ferry's.
  testing::TempDir dir;
  REQUIRE(WriteBundle(*r, dir.path() + "/m").ok());
  Result<Bundle> bundle = LoadBundle(dir.path() + "/m");
  CHECK_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
}

TEST_CASE("unsupported ops, attributes and operands are refused naming the node and opset") {
  onnx::ModelProto m = Model({4});
  Node(m, "Erf", {"x"}, "y");
  Output(m, "y");
  std::string e = ErrorOf(m);
  CHECK(Contains(e, "m.onnx: node 'Erf_1' (Erf, opset 17): op Erf is not supported"));
  CHECK(Contains(e, "Conv, Div, Dropout"));

  onnx::ModelProto attr = Model({4});
  IntAttr(Node(attr, "Relu", {"x"}, "y"), "alpha", 2);
  Output(attr, "y");
  CHECK(Contains(ErrorOf(attr), "(Relu, opset 17): attribute 'alpha' is not supported"));

  onnx::ModelProto softmax = Model({4});
  IntAttr(Node(softmax, "Softmax", {"x"}, "y"), "axis", 0);
  Output(softmax, "y");
  CHECK(Contains(ErrorOf(softmax), "axis must be one of the axes after the batch axis"));

  onnx::ModelProto group = Model({2, 4, 4});
  Init(group, "w", {2, 1, 1, 1}, {1, 1});
  IntAttr(Node(group, "Conv", {"x", "w"}, "y"), "group", 3);
  Output(group, "y");
  CHECK(Contains(ErrorOf(group), "by [2, 1, 1, 1] in 3 groups"));

  onnx::ModelProto pads = Model({1, 4, 4});
  Init(pads, "w", {1, 1, 1, 1}, {1});
  IntsAttr(Node(pads, "Conv", {"x", "w"}, "y"), "pads", {1, 0, 0, 0});
  Output(pads, "y");
  CHECK(Contains(ErrorOf(pads), "pads must be symmetric"));

  // A product of two computed [N, K] tensors would mix the rows of a batch.
  onnx::ModelProto matmul = Model({4});
  Node(matmul, "MatMul", {"x", "x"}, "y");
  Output(matmul, "y");
  CHECK(Contains(ErrorOf(matmul), "product of two computed tensors needs [N, ..., M, K]"));

  // A constant of the input's rank that is not 1 on axis 0 would differ between requests.
  onnx::ModelProto add = Model({4});
  Init(add, "k", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Node(add, "Add", {"x", "k"}, "y");
  Output(add, "y");
  CHECK(Contains(ErrorOf(add), "would span the batch axis"));

  onnx::ModelProto domain = Model({4});
  Node(domain, "Relu", {"x"}, "y")->set_domain("com.microsoft");
  Output(domain, "y");
  CHECK(Contains(ErrorOf(domain), "domain 'com.microsoft' is not supported"));
}

TEST_CASE("depthwise convolution keeps its groups; Clip takes its bounds from either form") {
  onnx::ModelProto m = Model({2, 4, 4});
  Init(m, "w", {2, 1, 3, 3}, std::vector<float>(18, 1.0f));
  Init(m, "lo", {}, {0});
  Init(m, "hi", {}, {6});
  onnx::NodeProto* conv = Node(m, "Conv", {"x", "w"}, "c");
  IntAttr(conv, "group", 2);
  IntsAttr(conv, "pads", {1, 1, 1, 1});
  Node(m, "Clip", {"c", "lo", "hi"}, "y");
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->manifest.program[0].groups == 2);
  CHECK(r->manifest.program[1].kind == OpKind::kClip);
  CHECK(r->manifest.program[1].min == 0);
  CHECK(r->manifest.program[1].max == 6);
  Result<Manifest> text = ParseManifest(ManifestToml(r->manifest), "manifest.toml");
  REQUIRE_MESSAGE(text.ok(), (text.ok() ? "" : text.error().message));
  CHECK(text->program[0].groups == 2);
  CHECK(text->program[1].max == 6);

  onnx::ModelProto open = Model({4});
  Node(open, "Clip", {"x", "", ""}, "y");  // No bounds: the whole float range.
  Output(open, "y");
  Result<ImportedModel> unbounded = Import(open);
  REQUIRE_MESSAGE(unbounded.ok(), (unbounded.ok() ? "" : unbounded.error().message));
  CHECK(unbounded->manifest.program[0].max == std::numeric_limits<float>::max());
  CHECK(ParseManifest(ManifestToml(unbounded->manifest), "manifest.toml").ok());

  onnx::ModelProto old = Model({4}, 6);
  onnx::NodeProto* clip = Node(old, "Clip", {"x"}, "y");
  for (auto [name, value] : {std::pair<const char*, float>{"min", -1}, {"max", 1}}) {
    auto* a = clip->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  Output(old, "y");
  Result<ImportedModel> attrs = Import(old);
  REQUIRE_MESSAGE(attrs.ok(), (attrs.ok() ? "" : attrs.error().message));
  CHECK(attrs->manifest.program[0].min == -1);
  CHECK(attrs->manifest.program[0].max == 1);

  onnx::ModelProto inverted = Model({4});
  Init(inverted, "lo", {}, {2});
  Init(inverted, "hi", {}, {1});
  Node(inverted, "Clip", {"x", "lo", "hi"}, "y");
  Output(inverted, "y");
  CHECK(Contains(ErrorOf(inverted), "min must not exceed max"));
}

// GELU as PyTorch exports it: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5, or with
// the 0.5 applied to x first. `scalars_as_nodes`: the constants come from Constant nodes.
onnx::ModelProto Gelu(bool half_first, bool scalars_as_nodes) {
  onnx::ModelProto m = Model({4});
  auto scalar = [&](const std::string& name, float v) {
    if (!scalars_as_nodes) {
      Init(m, name, {}, {v});
      return;
    }
    onnx::NodeProto* c = Node(m, "Constant", {}, name);
    auto* a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(v);
  };
  scalar("sqrt2", 1.4142135f);
  scalar("one", 1.0f);
  scalar("half", 0.5f);
  Node(m, "Div", {"x", "sqrt2"}, "d");
  Node(m, "Erf", {"d"}, "e");
  Node(m, "Add", {"one", "e"}, "a");
  if (half_first) {
    Node(m, "Mul", {"half", "x"}, "h");
    Node(m, "Mul", {"a", "h"}, "y");
  } else {
    Node(m, "Mul", {"x", "a"}, "p");
    Node(m, "Mul", {"p", "half"}, "y");
  }
  Output(m, "y");
  return m;
}

TEST_CASE("PyTorch's exact GELU subgraph becomes one gelu op, in either order") {
  for (bool half_first : {false, true}) {
    for (bool nodes : {false, true}) {
      CAPTURE(half_first);
      CAPTURE(nodes);
      Result<ImportedModel> r = Import(Gelu(half_first, nodes));
      REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
      REQUIRE(r->manifest.program.size() == 1);
      CHECK(r->manifest.program[0].kind == OpKind::kGelu);
      CHECK(r->manifest.program[0].inputs[0] == "x");
      CHECK(r->manifest.program[0].output == "y");
    }
  }
  // An intermediate read elsewhere (here the Erf's output is also a graph output) is not a
  // GELU: its nodes convert one by one, and the Erf among them is an unsupported op.
  onnx::ModelProto leak = Gelu(false, false);
  Output(leak, "e");
  CHECK(Contains(ErrorOf(leak), "op Erf is not supported"));
  // A wrong constant (1.5 instead of sqrt 2) is not a GELU either.
  onnx::ModelProto wrong = Gelu(false, false);
  wrong.mutable_graph()->mutable_initializer(0)->set_float_data(0, 1.5f);
  CHECK(Contains(ErrorOf(wrong), "op Erf is not supported"));
}

// ids: INT64 [N, 5]; Gather from `table` [10, 3]; then `then` (a node list built by the caller).
onnx::ModelProto Embedding(int64_t axis = 0) {
  onnx::ModelProto m = Model({5});
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  std::vector<float> table(30);
  std::iota(table.begin(), table.end(), 0.0f);
  Init(m, "table", {10, 3}, table);
  onnx::NodeProto* gather = Node(m, "Gather", {"table", "x"}, "e");
  if (axis != 0) {
    IntAttr(gather, "axis", axis);
  }
  return m;
}

TEST_CASE("Gather: an embedding table, its ids an INT64 input given the table's range") {
  onnx::ModelProto m = Embedding();
  onnx::NodeProto* mean = Node(m, "ReduceMean", {"e"}, "y");
  IntsAttr(mean, "axes", {1});
  IntAttr(mean, "keepdims", 0);
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const Manifest& manifest = r->manifest;
  CHECK(manifest.inputs[0].dtype == DType::kI64);
  REQUIRE(manifest.inputs[0].range.has_value());
  CHECK(*manifest.inputs[0].range == std::array<int64_t, 2>{0, 9});
  REQUIRE(manifest.program.size() == 2);
  CHECK(manifest.program[0].kind == OpKind::kGather);
  CHECK(manifest.program[1].kind == OpKind::kReduceMean);
  CHECK(manifest.program[1].axis == 1);
  CHECK(manifest.outputs[0].shape == Shape{kBatchDim, 3});
  CHECK(Contains(ManifestToml(manifest), "range = [0, 9]"));

  // keepdims (the default) keeps the axis as size 1.
  onnx::ModelProto kept = Embedding();
  IntsAttr(Node(kept, "ReduceMean", {"e"}, "y"), "axes", {-2});
  Output(kept, "y");
  Result<ImportedModel> k = Import(kept);
  REQUIRE_MESSAGE(k.ok(), (k.ok() ? "" : k.error().message));
  CHECK(k->manifest.outputs[0].shape == Shape{kBatchDim, 1, 3});

  // Refused: another axis, a float index input, the batch axis or several axes reduced,
  // a cast to anything but FLOAT.
  onnx::ModelProto along = Embedding(1);
  Output(along, "e");
  CHECK(Contains(ErrorOf(along), "only axis 0"));
  onnx::ModelProto floats = Model({5});
  Init(floats, "table", {10, 3}, std::vector<float>(30));
  Node(floats, "Gather", {"table", "x"}, "e");
  Output(floats, "e");
  CHECK(Contains(ErrorOf(floats), "the indices must be an integer input"));
  for (std::vector<int64_t> axes : {std::vector<int64_t>{0}, std::vector<int64_t>{1, 2}}) {
    onnx::ModelProto bad = Embedding();
    IntsAttr(Node(bad, "ReduceMean", {"e"}, "y"), "axes", axes);
    Output(bad, "y");
    CHECK(Contains(ErrorOf(bad), "only one axis after the batch axis"));
  }
  onnx::ModelProto cast = Model({4});
  IntAttr(Node(cast, "Cast", {"x"}, "y"), "to", onnx::TensorProto::INT64);
  Output(cast, "y");
  CHECK(Contains(ErrorOf(cast), "only a cast to FLOAT"));
}

TEST_CASE("attention's ops: broadcasting arithmetic, Transpose, MatMul, Unsqueeze, Squeeze") {
  // x [N, 2, 3]: x * 2, x^T over the last two axes, (x * 2) @ x^T, then unsqueeze + squeeze.
  onnx::ModelProto m = Model({2, 3});
  Init(m, "two", {}, {2.0f});
  Node(m, "Mul", {"two", "x"}, "d");
  IntsAttr(Node(m, "Transpose", {"x"}, "t"), "perm", {0, 2, 1});
  Node(m, "MatMul", {"d", "t"}, "p");
  onnx::TensorProto* axes = m.mutable_graph()->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(1);
  Node(m, "Unsqueeze", {"p", "axes"}, "u");
  Node(m, "Squeeze", {"u", "axes"}, "y");
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const std::vector<Op>& program = r->manifest.program;
  REQUIRE(program.size() == 5);
  CHECK(program[0].kind == OpKind::kMul);
  CHECK(program[0].reverse);  // The constant came first.
  CHECK(program[1].kind == OpKind::kTranspose);
  CHECK(program[1].perm == std::vector<int64_t>{0, 2, 1});
  CHECK(program[2].kind == OpKind::kMatMul);
  CHECK(program[3].kind == OpKind::kReshape);
  CHECK(r->manifest.outputs[0].shape == Shape{kBatchDim, 2, 2});
  std::string toml = ManifestToml(r->manifest);
  CHECK(Contains(toml, "reverse = true"));
  CHECK(Contains(toml, "perm = [0, 2, 1]"));

  // What would move or mix the batch axis is refused.
  onnx::ModelProto swap = Model({2, 3});
  IntsAttr(Node(swap, "Transpose", {"x"}, "y"), "perm", {1, 0, 2});
  Output(swap, "y");
  CHECK(Contains(ErrorOf(swap), "keep axis 0 first"));
  onnx::ModelProto reverse = Model({2, 3});
  Node(reverse, "Transpose", {"x"}, "y");
  Output(reverse, "y");
  CHECK(Contains(ErrorOf(reverse), "perm is required"));
  onnx::ModelProto front = Model({2, 3});
  onnx::TensorProto* zero = front.mutable_graph()->add_initializer();
  zero->set_name("axes");
  zero->set_data_type(onnx::TensorProto::INT64);
  zero->add_dims(1);
  zero->add_int64_data(0);
  Node(front, "Unsqueeze", {"x", "axes"}, "y");
  Output(front, "y");
  CHECK(Contains(ErrorOf(front), "distinct axes after the batch axis"));
  // Unsqueeze past the 8 axes a manifest holds.
  onnx::ModelProto deep = Model({2});
  onnx::TensorProto* many = deep.mutable_graph()->add_initializer();
  many->set_name("axes");
  many->set_data_type(onnx::TensorProto::INT64);
  many->add_dims(8);
  for (int64_t a = 1; a <= 8; ++a) {
    many->add_int64_data(a);
  }
  Node(deep, "Unsqueeze", {"x", "axes"}, "y");
  Output(deep, "y");
  CHECK(Contains(ErrorOf(deep), "has 10 axes; at most 8"));
  onnx::ModelProto ints = Model({2});
  onnx::TensorProto* k = ints.mutable_graph()->add_initializer();
  k->set_name("k");
  k->set_data_type(onnx::TensorProto::INT64);
  k->add_dims(2);
  k->add_int64_data(1);
  k->add_int64_data(2);
  Node(ints, "Sub", {"x", "k"}, "y");
  Output(ints, "y");
  CHECK(Contains(ErrorOf(ints), "integer constant operand"));
}

TEST_CASE("inputs: numeric types only, fixed axes after the batch axis, each named once") {
  onnx::ModelProto text = Model({4});
  text.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::STRING);
  Node(text, "Relu", {"x"}, "y");
  Output(text, "y");
  CHECK(Contains(ErrorOf(text), "input 'x' is STRING"));

  onnx::ModelProto dynamic = Model({4});
  dynamic.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_param("seq");
  Node(dynamic, "Relu", {"x"}, "y");
  Output(dynamic, "y");
  CHECK(Contains(ErrorOf(dynamic), "input 'x' axis 1 is dynamic ('seq')"));

  onnx::ModelProto passthrough = Model({4});
  Node(passthrough, "Identity", {"x"}, "y");
  Output(passthrough, "y");
  Result<ImportedModel> copied = Import(passthrough);
  REQUIRE_MESSAGE(copied.ok(), (copied.ok() ? "" : copied.error().message));
  REQUIRE(copied->manifest.program.size() == 1);
  CHECK(copied->manifest.program[0].kind == OpKind::kReshape);
  CHECK(copied->manifest.program[0].inputs[0] == "x");
  CHECK(copied->manifest.program[0].output == "y");
  onnx::ModelProto vector = Model({});
  Node(vector, "Identity", {"x"}, "y");
  Output(vector, "y");
  CHECK(Contains(ErrorOf(vector), "output 'y' passes through a tensor of rank 1"));
}

TEST_CASE("sizes that would overflow are refused: rows over 2^40 elements, a huge diagonal") {
  onnx::ModelProto wide = Model({int64_t{1} << 21, int64_t{1} << 20});
  Node(wide, "Relu", {"x"}, "y");
  Output(wide, "y");
  CHECK(Contains(ErrorOf(wide), "input 'x' [-1, 2097152, 1048576] has more than 2^40 elements"));
  // An op's output over 2^40 per row, from a modest input and weight: [N, 2^20, 1] x [1, 2^21].
  onnx::ModelProto grown = Model({int64_t{1} << 20, 1});
  Init(grown, "w", {1, int64_t{1} << 21}, std::vector<float>(size_t{1} << 21, 1.0f));
  Node(grown, "MatMul", {"x", "w"}, "y");
  Output(grown, "y");
  CHECK(Contains(ErrorOf(grown), "output 'y' [-1, 1048576, 2097152] has more than 2^40"));
  // A reshape whose dims multiply past any row (2^31 five times) is refused, not overflowed.
  onnx::ModelProto reshape = Model({4});
  onnx::TensorProto* shape = reshape.mutable_graph()->add_initializer();
  shape->set_name("s");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(6);
  for (int64_t v : {int64_t{0}, int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31,
                    int64_t{1} << 31, int64_t{1} << 31}) {
    shape->add_int64_data(v);
  }
  Node(reshape, "Reshape", {"x", "s"}, "y");
  Output(reshape, "y");
  CHECK(Contains(ErrorOf(reshape), "cannot reshape [N, 4]"));
  // A batch norm with nothing to fold into, over 5000 channels: a 5000^2 weight is refused.
  onnx::ModelProto bn = Model({5000});
  for (const char* name : {"s", "b", "m", "v"}) {
    Init(bn, name, {5000}, std::vector<float>(5000, 1.0f));
  }
  Node(bn, "BatchNormalization", {"x", "s", "b", "m", "v"}, "y");
  Output(bn, "y");
  CHECK(Contains(ErrorOf(bn), "over 5000 channels with no Conv or Gemm to fold into"));
}

TEST_CASE("an undefined input (a cycle, or nodes out of order) is refused") {
  onnx::ModelProto m = Model({4});
  Node(m, "Relu", {"b"}, "a");
  Node(m, "Relu", {"a"}, "b");
  Output(m, "b");
  CHECK(Contains(ErrorOf(m), "input 'b' is not defined by the graph or an earlier node"));
}

TEST_CASE("hostile files: truncated, wrong opset, lying tensors, too many nodes") {
  std::string good = Bytes(Mlp());
  for (size_t cut : {size_t{1}, good.size() / 2, good.size() - 1}) {
    CAPTURE(cut);
    Result<OnnxModel> r = Parse(good.substr(0, cut));
    if (r.ok()) {  // A cut at a field boundary parses; the graph is then incomplete.
      CHECK_FALSE(ConvertOnnx(*r, ImportOptions{"m", {1}}).ok());
    }
  }
  CHECK(Contains(Parse("\xff\xff\xff\xff garbage").error().message, "does not parse"));
  CHECK(Contains(Parse(Bytes(Model({4}, 18))).error().message,
                 "opset 18: ferry imports opsets 1 to 17"));
  // An older opset converts where the op's version in effect has the semantics ferry
  // implements (Relu 6), and is refused where it has not (Softmax 11 flattens to 2-D).
  onnx::ModelProto old = Model({4}, 11);
  Node(old, "Relu", {"x"}, "y");
  Output(old, "y");
  CHECK(Import(old).ok());
  onnx::ModelProto softmax = Model({4}, 11);
  Node(softmax, "Softmax", {"x"}, "y");
  Output(softmax, "y");
  CHECK(Contains(ErrorOf(softmax),
                 "(Softmax, opset 11): version 11 of Softmax is not supported "
                 "(ferry converts versions 13"));

  onnx::ModelProto lie = Mlp();
  lie.mutable_graph()->mutable_initializer(0)->set_dims(0, 3);  // 9 elements, 6 values.
  CHECK(Contains(Parse(Bytes(lie)).error().message, "does not match its dimensions"));
  onnx::ModelProto huge = Mlp();
  huge.mutable_graph()->mutable_initializer(0)->set_dims(0, int64_t{1} << 40);
  CHECK(Contains(Parse(Bytes(huge)).error().message, "exceeds 2^32 elements"));
  onnx::ModelProto raw = Mlp();
  raw.mutable_graph()->mutable_initializer(0)->clear_float_data();
  raw.mutable_graph()->mutable_initializer(0)->set_raw_data(std::string(23, '\0'));
  CHECK(Contains(Parse(Bytes(raw)).error().message, "23 bytes of data for 6 elements"));

  onnx::ModelProto many = Model({4});
  for (size_t i = 0; i <= kMaxOnnxNodes; ++i) {
    many.mutable_graph()->add_node()->set_op_type("Relu");
  }
  CHECK(Contains(Parse(Bytes(many)).error().message, "nodes, more than 100000"));
}

TEST_CASE("external data: read inside the model's directory, never outside it") {
  testing::TempDir dir;
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  {
    std::ofstream f(dir.path() + "/w.bin", std::ios::binary);
    f.write("pad!", 4);
    f.write(reinterpret_cast<const char*>(w.data()), 24);
  }
  auto with_location = [&](const std::string& location, const std::string& offset,
                           const std::string& model_dir = "") {
    onnx::ModelProto m = Mlp();
    onnx::TensorProto* t = m.mutable_graph()->mutable_initializer(0);
    t->clear_float_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* loc = t->add_external_data();
    loc->set_key("location");
    loc->set_value(location);
    auto* off = t->add_external_data();
    off->set_key("offset");
    off->set_value(offset);
    return Parse(Bytes(m), model_dir.empty() ? dir.path() : model_dir);
  };
  Result<OnnxModel> ok = with_location("w.bin", "4");
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->initializers.at("W").floats == w);
  CHECK(Contains(with_location("w.bin", "8").error().message, "run past the end"));
  CHECK(Contains(with_location("../w.bin", "0").error().message, "must be a relative path"));
  CHECK(Contains(with_location("/etc/passwd", "0").error().message, "must be a relative path"));
  CHECK(Contains(with_location("w.bin", "-1").error().message, "is not a number"));
  fs::create_symlink("/etc", dir.path() + "/up");
  CHECK(Contains(with_location("up/passwd", "0").error().message, "resolves outside"));
  std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_FALSE(with_location("fifo", "0").ok());
  onnx::ModelProto m = Mlp();
  m.mutable_graph()->mutable_initializer(0)->set_data_location(onnx::TensorProto::EXTERNAL);
  CHECK(Contains(Parse(Bytes(m)).error().message, "external data is not allowed here"));
  // A directory that does not resolve never lets the location through.
  CHECK(Contains(with_location("w.bin", "4", dir.path() + "/no-such-dir").error().message,
                 "resolves outside"));
}

}  // namespace
}  // namespace ferry::onnx_import
