// The converters of onnx_nn_ops.cc and AveragePool: what each becomes, and every refusal
// (constants among computed tensors, the batch axis, split sizes that lie, non-finite
// constants, computed axes).
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <limits>

#include "model/onnx/test_graphs.h"

namespace ferry::onnx_import {
namespace {

using namespace graphs;  // NOLINT: the graph builders.

void FloatAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

TEST_CASE("Concat of computed tensors becomes one concat; constants and axis 0 are refused") {
  onnx::ModelProto m = Model({2, 3});
  Node(m, "Relu", {"x"}, "a");
  Node(m, "Sigmoid", {"x"}, "b");
  IntAttr(Node(m, "Concat", {"a", "b", "x"}, "y"), "axis", -1);
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const Op& concat = r->manifest.program.back();
  CHECK(concat.kind == OpKind::kConcat);
  CHECK(concat.inputs.size() == 3);
  CHECK(concat.axis == 2);
  CHECK(r->manifest.outputs[0].shape == Shape{kBatchDim, 2, 9});
  Result<Manifest> parsed = ParseManifest(ManifestToml(r->manifest), "manifest.toml");
  REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
  CHECK(parsed->program.back().inputs == concat.inputs);

  onnx::ModelProto constant = Model({3});
  Init(constant, "k", {1, 3}, {1, 2, 3});
  IntAttr(Node(constant, "Concat", {"x", "k"}, "y"), "axis", 1);
  Output(constant, "y");
  CHECK(Contains(ErrorOf(constant), "input 1 must be a tensor computed from the model's inputs"));

  onnx::ModelProto batch = Model({3});
  IntAttr(Node(batch, "Concat", {"x", "x"}, "y"), "axis", 0);
  Output(batch, "y");
  CHECK(Contains(ErrorOf(batch), "axis must be one of the axes after the batch axis"));

  onnx::ModelProto ranks = Model({2, 3});
  onnx::NodeProto* max = Node(ranks, "ReduceMax", {"x"}, "r");  // [N, 2]
  IntsAttr(max, "axes", {2});
  IntAttr(max, "keepdims", 0);
  IntAttr(Node(ranks, "Concat", {"x", "r"}, "y"), "axis", 1);
  Output(ranks, "y");
  CHECK(Contains(ErrorOf(ranks), "input 1 [N, 2] does not match [N, 2, 3]"));
}

TEST_CASE("Split becomes one slice per output; sizes that do not fit are refused") {
  onnx::ModelProto m = Model({6, 2});
  onnx::NodeProto* split = Node(m, "Split", {"x"}, "a");
  split->add_output("b");
  split->add_output("c");
  IntAttr(split, "axis", 1);
  Output(m, "a");
  Output(m, "c");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  REQUIRE(r->manifest.program.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(r->manifest.program[i].kind == OpKind::kSlice);
    CHECK(r->manifest.program[i].start == 2 * i);
    CHECK(r->manifest.program[i].end == 2 * i + 2);
  }
  CHECK(r->manifest.outputs[1].shape == Shape{kBatchDim, 2, 2});

  auto sized = [](std::vector<int64_t> sizes) {
    onnx::ModelProto bad = Model({6});
    IntInit(bad, "s", {static_cast<int64_t>(sizes.size())}, sizes);
    onnx::NodeProto* n = Node(bad, "Split", {"x", "s"}, "a");
    n->add_output("b");
    IntAttr(n, "axis", 1);
    Output(bad, "a");
    Output(bad, "b");
    return bad;
  };
  Result<ImportedModel> ok = Import(sized({2, 4}));
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().message));
  CHECK(ok->manifest.outputs[1].shape == Shape{kBatchDim, 4});
  CHECK(Contains(ErrorOf(sized({2, 5})), "must sum to the axis"));
  CHECK(Contains(ErrorOf(sized({0, 6})), "must be positive"));
  CHECK(Contains(ErrorOf(sized({-1, 7})), "must be positive"));
  CHECK(Contains(ErrorOf(sized({2, 2, 2})), "one per output"));
  CHECK(Contains(ErrorOf(sized({std::numeric_limits<int64_t>::max(), 1})), "must be positive"));

  onnx::ModelProto uneven = Model({5});
  onnx::NodeProto* n = Node(uneven, "Split", {"x"}, "a");
  n->add_output("b");
  IntAttr(n, "axis", 1);
  Output(uneven, "a");
  CHECK(Contains(ErrorOf(uneven), "does not split into 2 equal parts"));
}

TEST_CASE("activations carry their constants; non-finite ones are refused") {
  onnx::ModelProto m = Model({4});
  FloatAttr(Node(m, "LeakyRelu", {"x"}, "a"), "alpha", 0.25f);
  onnx::NodeProto* hs = Node(m, "HardSigmoid", {"a"}, "b");
  FloatAttr(hs, "alpha", 0.5f);
  FloatAttr(hs, "beta", 0.25f);
  Node(m, "HardSwish", {"b"}, "c");
  Node(m, "LogSoftmax", {"c"}, "y");
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const std::vector<Op>& p = r->manifest.program;
  REQUIRE(p.size() == 4);
  CHECK((p[0].kind == OpKind::kLeakyRelu && p[0].alpha == 0.25));
  CHECK((p[1].kind == OpKind::kHardSigmoid && p[1].alpha == 0.5 && p[1].beta == 0.25));
  CHECK(p[2].kind == OpKind::kHardSwish);
  CHECK((p[3].kind == OpKind::kLogSoftmax && p[3].axis == 1));

  onnx::ModelProto inf = Model({4});
  FloatAttr(Node(inf, "LeakyRelu", {"x"}, "y"), "alpha", std::numeric_limits<float>::infinity());
  Output(inf, "y");
  CHECK(Contains(ErrorOf(inf), "alpha and beta must be finite"));
}

TEST_CASE("ReduceSum takes constant axes (an input from version 13); AveragePool") {
  onnx::ModelProto m = Model({3, 4}, 13);
  IntInit(m, "axes", {1}, {-1});
  IntAttr(Node(m, "ReduceSum", {"x", "axes"}, "s"), "keepdims", 0);
  IntsAttr(Node(m, "ReduceMax", {"s"}, "y"), "axes", {1});
  Output(m, "y");
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK((r->manifest.program[0].kind == OpKind::kReduceSum && r->manifest.program[0].axis == 2));
  CHECK(r->manifest.program[1].kind == OpKind::kReduceMax);
  CHECK(r->manifest.outputs[0].shape == Shape{kBatchDim, 1});

  onnx::ModelProto computed = Model({3, 4}, 13);
  Node(computed, "Shape", {"x"}, "axes");  // Integer, but [N, 3, 4] holds the batch size.
  Node(computed, "ReduceSum", {"x", "axes"}, "y");
  Output(computed, "y");
  CHECK_FALSE(Import(computed).ok());

  onnx::ModelProto pool = Model({2, 5, 5});
  onnx::NodeProto* n = Node(pool, "AveragePool", {"x"}, "y");
  IntsAttr(n, "kernel_shape", {3, 3});
  IntsAttr(n, "pads", {1, 1, 1, 1});
  IntAttr(n, "count_include_pad", 1);
  Output(pool, "y");
  Result<ImportedModel> p = Import(pool);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK((p->manifest.program[0].kind == OpKind::kAvgPool2d && p->manifest.program[0].count_pad));
  CHECK(p->manifest.outputs[0].shape == Shape{kBatchDim, 2, 5, 5});

  onnx::ModelProto max = Model({2, 112, 112});
  onnx::NodeProto* mp = Node(max, "MaxPool", {"x"}, "y");
  IntsAttr(mp, "kernel_shape", {3, 3});
  IntsAttr(mp, "strides", {2, 2});
  IntAttr(mp, "ceil_mode", 1);
  Output(max, "y");
  Result<ImportedModel> mr = Import(max);
  REQUIRE_MESSAGE(mr.ok(), (mr.ok() ? "" : mr.error().message));
  CHECK(mr->manifest.program[0].ceil);
  CHECK(mr->manifest.outputs[0].shape == Shape{kBatchDim, 2, 56, 56});
  Result<Manifest> parsed = ParseManifest(ManifestToml(mr->manifest), "manifest.toml");
  REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
  CHECK(parsed->program[0].ceil);

  onnx::ModelProto ceil = Model({2, 5, 5});
  onnx::NodeProto* c = Node(ceil, "AveragePool", {"x"}, "y");
  IntsAttr(c, "kernel_shape", {2, 2});
  IntAttr(c, "ceil_mode", 1);
  Output(ceil, "y");
  CHECK(Contains(ErrorOf(ceil), "ceil_mode must be 0"));
}

TEST_CASE("Pad by zeros passes through; the spatial mean becomes global_avgpool") {
  auto padded = [](std::vector<int64_t> pads, const char* mode) {
    onnx::ModelProto m = Model({2, 4, 4}, 13);
    IntInit(m, "pads", {8}, pads);
    onnx::NodeProto* n = Node(m, "Pad", {"x", "pads"}, "p");
    auto* a = n->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode);
    Node(m, "Relu", {"p"}, "y");
    Output(m, "y");
    return m;
  };
  Result<ImportedModel> r = Import(padded({0, 0, 0, 0, 0, 0, 0, 0}, "constant"));
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  REQUIRE(r->manifest.program.size() == 1);
  CHECK(r->manifest.program[0].inputs[0] == "x");
  CHECK(Contains(ErrorOf(padded({0, 0, 1, 1, 0, 0, 1, 1}, "constant")), "only zero pads"));
  CHECK(Contains(ErrorOf(padded({0, 0, 0, 0, 0, 0, 0, 0}, "reflect")), "only constant padding"));

  for (int keep : {0, 1}) {
    CAPTURE(keep);
    onnx::ModelProto m = Model({3, 4, 4});
    onnx::NodeProto* n = Node(m, "ReduceMean", {"x"}, "y");
    IntsAttr(n, "axes", {-1, 2});
    IntAttr(n, "keepdims", keep);
    Output(m, "y");
    Result<ImportedModel> mean = Import(m);
    REQUIRE_MESSAGE(mean.ok(), (mean.ok() ? "" : mean.error().message));
    CHECK(mean->manifest.program[0].kind == OpKind::kGlobalAvgPool);
    CHECK(mean->manifest.outputs[0].shape ==
          (keep ? Shape{kBatchDim, 3, 1, 1} : Shape{kBatchDim, 3}));
  }
  onnx::ModelProto other = Model({3, 4, 4});
  IntsAttr(Node(other, "ReduceMean", {"x"}, "y"), "axes", {1, 2});
  Output(other, "y");
  CHECK(Contains(ErrorOf(other), "only one axis after the batch axis"));
}

TEST_CASE("ArgMax gives the graph's INT64 output; axis 0 is refused") {
  onnx::ModelProto m = Model({3, 5});
  onnx::NodeProto* n = Node(m, "ArgMax", {"x"}, "y");
  IntAttr(n, "axis", -1);
  IntAttr(n, "keepdims", 0);
  IntAttr(n, "select_last_index", 1);
  Output(m, "y");
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  Result<ImportedModel> r = Import(m);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK((r->manifest.program[0].kind == OpKind::kArgMax && r->manifest.program[0].axis == 2));
  CHECK(r->manifest.program[0].last_index);
  CHECK(r->manifest.outputs[0].dtype == DType::kI64);
  CHECK(r->manifest.outputs[0].shape == Shape{kBatchDim, 3});
  Result<Manifest> parsed = ParseManifest(ManifestToml(r->manifest), "manifest.toml");
  REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
  CHECK(parsed->outputs[0].dtype == DType::kI64);
  CHECK(parsed->program[0].last_index);

  onnx::ModelProto batch = Model({3});
  Node(batch, "ArgMax", {"x"}, "y");  // The default axis: 0.
  Output(batch, "y");
  CHECK(Contains(ErrorOf(batch), "axis must be one of the axes after the batch axis"));

  onnx::ModelProto text = Model({3});
  Node(text, "Relu", {"x"}, "y");
  Output(text, "y");
  text.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::STRING);
  CHECK(Contains(ErrorOf(text), "of a type ferry does not give"));
}

}  // namespace
}  // namespace ferry::onnx_import
