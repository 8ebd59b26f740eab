// ONNX's own backend node tests (Debian's libonnx-testdata: model.onnx, test_data_set_0/
// input_N.pb, output_N.pb) for every op the importer converts, run through the importer and
// CpuBackend with ONNX's tolerances (rtol 1e-3, atol 1e-7). Operands ferry takes as weights
// (Gemm's B and C, Conv's W and B, ...) are graph inputs in these tests; the runner makes them
// initializers with the test's own values. A numeric mismatch fails the test; a model the
// importer refuses is counted as refused with its reason. FERRY_ONNX_NODE_TABLE=FILE writes
// the per-op table docs/models.md shows.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "common/file.h"
#include "model/onnx/converter.h"
#include "tests/onnx/onnx_runner.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using onnx_import::ConstTensor;

// Operand positions ferry takes as weights, per op.
const std::map<std::string, std::set<int>> kWeightOperands = {
    {"Gemm", {1, 2}},
    {"MatMul", {1}},
    {"Conv", {1, 2}},
    {"BatchNormalization", {1, 2, 3, 4}},
    {"LayerNormalization", {1, 2}},
    {"Reshape", {1}},
    {"Dropout", {1, 2}},
    {"Clip", {1, 2}},
    {"Gather", {0}},
    {"Unsqueeze", {1}},
    {"Squeeze", {1}},
    {"Pow", {1}},
    {"ReduceSum", {1}},
    {"Split", {1}},
};
// Arithmetic whose operand of lower rank than the first is a constant in ferry's terms (a
// batched tensor always has the batch axis).
const std::set<std::string> kBroadcastOps = {"Add", "Sub", "Mul", "Div"};

std::string DataDir() {
  const char* env = std::getenv("FERRY_ONNX_NODE_TESTS");
  return env != nullptr ? env : "/usr/share/libonnx-testdata/data/node";
}

struct Outcome {
  enum Kind { kPassed, kFailed, kRefused, kFolded } kind;
  std::string detail;
};

std::string ReadBytes(const std::string& path) {
  Result<std::string> bytes = ReadRegularFile(path, 1 << 30, Symlinks::kFollow);
  return bytes.ok() ? *bytes : "";
}

// `model` (a node test's, changed) through ferry's hostile-file parser, as the importer reads.
Result<onnx_import::OnnxModel> Reparse(const onnx::ModelProto& model, const fs::path& dir) {
  std::string bytes = model.SerializeAsString();
  return onnx_import::ParseOnnx(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      dir.filename().string(), "");
}

// The test with every input an initializer, folded as the importer folds shape computations
// (onnx_import::FoldGraph), each output compared with ONNX's: integers exactly, floats with
// the tolerances above.
Outcome RunFolded(const fs::path& dir) {
  onnx::ModelProto model;
  model.ParseFromString(ReadBytes((dir / "model.onnx").string()));
  onnx::GraphProto* graph = model.mutable_graph();
  fs::path data = dir / "test_data_set_0";
  for (int i = 0; i < graph->input_size(); ++i) {
    onnx::TensorProto* t = graph->add_initializer();
    t->ParseFromString(ReadBytes((data / ("input_" + std::to_string(i) + ".pb")).string()));
    t->set_name(graph->input(i).name());
  }
  graph->clear_input();
  Result<onnx_import::OnnxModel> parsed = Reparse(model, dir);
  if (!parsed.ok()) {
    return Outcome{Outcome::kRefused, parsed.error().message};
  }
  Result<std::vector<ConstTensor>> got = onnx_import::FoldGraph(*parsed);
  if (!got.ok()) {
    return Outcome{Outcome::kRefused, got.error().message};
  }
  for (size_t o = 0; o < got->size(); ++o) {
    Result<ConstTensor> want =
        onnx_import::ReadTensorFile((data / ("output_" + std::to_string(o) + ".pb")).string());
    const ConstTensor& g = (*got)[o];
    std::string where = "output " + std::to_string(o) + " (folded): ";
    if (!want.ok()) {
      return Outcome{Outcome::kFailed, where + want.error().message};
    }
    if (g.dims != want->dims || g.integer != want->integer || g.ints != want->ints) {
      return Outcome{Outcome::kFailed, where + "dims, type or integer values differ"};
    }
    double relative = 0;
    std::string mismatch = testing::Compare(g.floats, want->floats, 1e-3, 1e-7, &relative);
    if (!mismatch.empty()) {
      return Outcome{Outcome::kFailed, where + mismatch};
    }
  }
  return Outcome{Outcome::kFolded, ""};
}

// Runs one node test directory; nullopt when its op is not one ferry converts.
std::optional<Outcome> RunAsProgram(const fs::path& dir, std::string* op_type) {
  onnx::ModelProto model;
  if (!model.ParseFromString(ReadBytes((dir / "model.onnx").string())) ||
      model.graph().node_size() != 1) {
    return std::nullopt;
  }
  const onnx::NodeProto& node = model.graph().node(0);
  *op_type = node.op_type();
  if (onnx_import::FindOpConverter(node.op_type()) == nullptr || node.op_type() == "Constant") {
    return std::nullopt;
  }
  fs::path data = dir / "test_data_set_0";
  std::set<int> weights;
  if (auto it = kWeightOperands.find(node.op_type()); it != kWeightOperands.end()) {
    weights = it->second;
  }
  // Graph inputs in order; those feeding a weight operand become initializers.
  std::vector<std::vector<float>> inputs;
  onnx::GraphProto* graph = model.mutable_graph();
  onnx::GraphProto kept_inputs;
  for (int i = 0; i < graph->input_size(); ++i) {
    const std::string& name = graph->input(i).name();
    std::string file = (data / ("input_" + std::to_string(i) + ".pb")).string();
    int operand = -1;
    for (int k = 0; k < node.input_size(); ++k) {
      operand = node.input(k) == name ? k : operand;
    }
    int first_rank = model.graph().input(0).type().tensor_type().shape().dim_size();
    bool lower_rank = kBroadcastOps.count(node.op_type()) > 0 && operand > 0 &&
                      graph->input(i).type().tensor_type().shape().dim_size() < first_rank;
    if (weights.count(operand) > 0 || lower_rank) {
      onnx::TensorProto* t = graph->add_initializer();
      t->ParseFromString(ReadBytes(file));
      t->set_name(name);
      continue;
    }
    *kept_inputs.add_input() = graph->input(i);
    Result<ConstTensor> tensor = onnx_import::ReadTensorFile(file);
    if (!tensor.ok()) {
      return Outcome{Outcome::kRefused, "input " + name + ": " + tensor.error().message};
    }
    // Integer inputs (gather's indices) go in as exact floats; RunOnnx packs them as the
    // model input's type.
    inputs.push_back(tensor->integer ? std::vector<float>(tensor->ints.begin(), tensor->ints.end())
                                     : tensor->floats);
  }
  graph->mutable_input()->Swap(kept_inputs.mutable_input());
  // LayerNormalization's Mean and InvStdDev are training outputs ferry does not produce: Y is
  // compared alone.
  if (node.op_type() == "LayerNormalization") {
    while (graph->output_size() > 1) {
      graph->mutable_output()->RemoveLast();
    }
    auto* outputs = graph->mutable_node(0)->mutable_output();
    outputs->DeleteSubrange(1, outputs->size() - 1);
  }
  if (graph->input_size() == 0 || !graph->input(0).type().tensor_type().has_shape() ||
      graph->input(0).type().tensor_type().shape().dim_size() == 0) {
    return Outcome{Outcome::kRefused, "no batched input"};
  }
  int64_t rows = graph->input(0).type().tensor_type().shape().dim(0).dim_value();
  for (const onnx::ValueInfoProto& input : graph->input()) {
    const auto& shape = input.type().tensor_type().shape();
    if (shape.dim_size() == 0 || shape.dim(0).dim_value() != rows) {
      return Outcome{Outcome::kRefused,
                     "inputs differ in their first dimension, which ferry "
                     "batches together"};
    }
  }
  Result<onnx_import::OnnxModel> parsed = Reparse(model, dir);
  if (!parsed.ok()) {
    return Outcome{Outcome::kRefused, parsed.error().message};
  }
  testing::OnnxRun run = testing::RunOnnx(*parsed, rows, inputs, CpuMode::kFast);
  if (!run.imported) {
    return Outcome{Outcome::kRefused, run.status.error().message};
  }
  if (!run.status.ok()) {
    return Outcome{Outcome::kFailed, run.status.error().message};
  }
  for (size_t o = 0; o < run.outputs.size(); ++o) {
    Result<ConstTensor> want =
        onnx_import::ReadTensorFile((data / ("output_" + std::to_string(o) + ".pb")).string());
    double relative = 0;
    std::string mismatch =
        !want.ok() ? want.error().message
                   : testing::Compare(run.outputs[o],
                                      want->integer
                                          ? std::vector<float>(want->ints.begin(), want->ints.end())
                                          : want->floats,
                                      1e-3, 1e-7, &relative);
    if (!mismatch.empty()) {
      return Outcome{Outcome::kFailed, "output " + std::to_string(o) + ": " + mismatch};
    }
  }
  return Outcome{Outcome::kPassed, ""};
}

// As a program where the importer converts it; else, for an op the importer folds, folded.
std::optional<Outcome> RunNodeTest(const fs::path& dir, std::string* op_type) {
  std::optional<Outcome> outcome = RunAsProgram(dir, op_type);
  const onnx_import::OpEntry* entry = onnx_import::FindOpConverter(*op_type);
  if (outcome && outcome->kind == Outcome::kRefused && entry != nullptr && entry->fold != nullptr) {
    Outcome folded = RunFolded(dir);
    return folded.kind == Outcome::kRefused ? outcome : folded;
  }
  return outcome;
}

TEST_CASE("ONNX node tests of every converted op pass, or are refused with a reason") {
  if (!fs::is_directory(DataDir())) {
    MESSAGE("skipped: " << DataDir() << " absent (Debian's libonnx-testdata)");
    return;
  }
  std::vector<fs::path> dirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(DataDir())) {
    dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  std::map<std::string, std::array<std::vector<std::string>, 4>> table;
  std::set<std::string> passed;
  for (const fs::path& dir : dirs) {
    std::string op;
    std::optional<Outcome> outcome = RunNodeTest(dir, &op);
    if (!outcome) {
      continue;
    }
    std::string name = dir.filename().string();
    CHECK_MESSAGE(outcome->kind != Outcome::kFailed, name << ": " << outcome->detail);
    table[op][outcome->kind].push_back(
        outcome->kind == Outcome::kRefused ? name + " (" + outcome->detail + ")" : name);
    if (outcome->kind == Outcome::kPassed || outcome->kind == Outcome::kFolded) {
      passed.insert(name);
    }
  }
  // The tests the importer converts today: a refusal here is a regression.
  for (const char* name :
       {"test_relu", "test_sigmoid", "test_tanh", "test_softmax_axis_1", "test_add",
        "test_gemm_transposeB", "test_gemm_default_no_bias", "test_matmul_2d",
        "test_basic_conv_with_padding", "test_conv_with_strides_padding", "test_batchnorm_example",
        "test_maxpool_2d_default", "test_maxpool_2d_precomputed_pads",
        "test_conv_with_autopad_same", "test_globalaveragepool", "test_flatten_axis1",
        "test_layer_normalization_2d_axis1", "test_sqrt", "test_exp", "test_log", "test_neg",
        "test_reciprocal", "test_pow_bcast_scalar", "test_averagepool_2d_default",
        "test_averagepool_2d_strides", "test_concat_3d_axis_1", "test_leakyrelu",
        "test_hardsigmoid", "test_hardswish", "test_logsoftmax_axis_1",
        "test_reduce_max_keepdims_random", "test_reduce_sum_keepdims_random",
        "test_split_equal_parts_2d", "test_split_variable_parts_2d",
        "test_argmax_keepdims_random_select_last_index", "test_argmax_no_keepdims_example",
        // Folded at import (every input a constant), checked against ONNX's answers.
        "test_shape", "test_shape_start_1_end_negative_1", "test_slice_neg_steps",
        "test_slice_start_out_of_bounds", "test_concat_2d_axis_negative_1",
        "test_reshape_negative_dim", "test_reshape_allowzero_reordered", "test_gather_1",
        "test_gather_negative_indices", "test_expand_dim_changed", "test_where_example",
        "test_equal", "test_range_int32_type_negative_delta", "test_constantofshape_int_zeros",
        "test_cast_FLOAT_to_DOUBLE", "test_unsqueeze_negative_axes", "test_pow"}) {
    CHECK_MESSAGE(passed.count(name) == 1, name << " did not pass");
  }
  std::ostringstream text;
  text << "| op | passed | passed, folded | failed | refused |\n|---|---|---|---|---|\n";
  for (const auto& [op, outcomes] : table) {
    text << "| " << op << " | " << outcomes[0].size() << " | " << outcomes[3].size() << " | "
         << outcomes[1].size() << " | " << outcomes[2].size() << " |\n";
  }
  for (const auto& [op, outcomes] : table) {
    for (const std::string& refused : outcomes[2]) {
      text << "- " << op << ": " << refused << "\n";
    }
  }
  MESSAGE(text.str());
  if (const char* out = std::getenv("FERRY_ONNX_NODE_TABLE")) {
    std::ofstream(out) << text.str();
  }
}

}  // namespace
}  // namespace ferry
