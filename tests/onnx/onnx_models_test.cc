// Models exported from PyTorch (scripts/make_onnx_models.py: ResNet-18, MobileNetV2 and V3,
// GoogLeNet, DenseNet-121 and ShuffleNetV2 from torchvision, a CNN with batch norm, an MLP with
// batch norm, layer norm, GELU and dropout), imported and run on CpuBackend, against the module's
// own answer: max |got - want| <= 1e-4 x max |want|. FERRY_ONNX_MODELS names the directory the
// script wrote (CTest's fixture sets it).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

#include "tests/onnx/onnx_runner.h"

namespace ferry {
namespace {

using onnx_import::ConstTensor;

void CheckModel(const std::string& name, std::vector<CpuMode> modes) {
  const char* root = std::getenv("FERRY_ONNX_MODELS");
  REQUIRE_MESSAGE(root != nullptr, "FERRY_ONNX_MODELS is not set");
  std::string dir = std::string(root) + "/" + name;
  Result<onnx_import::OnnxModel> model = onnx_import::ReadOnnx(dir + "/model.onnx");
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  // Every input_K.pb the export wrote, integer ones (token ids, a mask) as exact floats.
  std::vector<std::vector<float>> inputs;
  int64_t rows = 0;
  for (int k = 0; std::filesystem::exists(dir + "/input_" + std::to_string(k) + ".pb"); ++k) {
    Result<ConstTensor> input =
        onnx_import::ReadTensorFile(dir + "/input_" + std::to_string(k) + ".pb");
    REQUIRE(input.ok());
    rows = input->dims[0];
    inputs.push_back(input->integer ? std::vector<float>(input->ints.begin(), input->ints.end())
                                    : input->floats);
  }
  REQUIRE_FALSE(inputs.empty());
  Result<ConstTensor> want = onnx_import::ReadTensorFile(dir + "/output_0.pb");
  REQUIRE(want.ok());
  for (CpuMode mode : modes) {
    CAPTURE(mode == CpuMode::kFast ? "fast" : "reference");
    testing::OnnxRun run = testing::RunOnnx(*model, rows, inputs, mode);
    REQUIRE_MESSAGE(run.status.ok(), (run.status.ok() ? "" : run.status.error().message));
    REQUIRE(run.outputs.size() == 1);
    double relative = 0;
    testing::Compare(run.outputs[0], want->floats, 0, 0, &relative);
    MESSAGE(name << ": max |ferry - torch| / max |torch| = " << relative);
    CHECK(relative <= 1e-4);
  }
}

TEST_CASE("ResNet-18 from torchvision answers as PyTorch does") {
  CheckModel("resnet18", {CpuMode::kFast});
}

TEST_CASE("MobileNetV2 from torchvision (depthwise convolutions, ReLU6) answers as PyTorch does") {
  CheckModel("mobilenet_v2", {CpuMode::kFast, CpuMode::kReference});
}

TEST_CASE("MobileNetV3-Small (HardSwish, HardSigmoid, squeeze-and-excitation) as PyTorch") {
  CheckModel("mobilenet_v3_small", {CpuMode::kFast, CpuMode::kReference});
}

TEST_CASE("GoogLeNet (Concat of four branches, MaxPool in ceil mode) answers as PyTorch does") {
  CheckModel("googlenet", {CpuMode::kFast});
}

TEST_CASE("DenseNet-121 (a growing Concat, AveragePool behind a zero Pad) as PyTorch") {
  CheckModel("densenet121", {CpuMode::kFast});
}

TEST_CASE("ShuffleNetV2 (channel shuffle, Split, the spatial mean) answers as PyTorch does") {
  CheckModel("shufflenet", {CpuMode::kFast, CpuMode::kReference});
}

TEST_CASE("a text classifier: INT64 token ids, an embedding lookup and a mean, as PyTorch") {
  CheckModel("text", {CpuMode::kFast, CpuMode::kReference});
}

TEST_CASE("a BERT-style encoder: embeddings, masked multi-head attention, GELU MLPs") {
  CheckModel("encoder", {CpuMode::kFast, CpuMode::kReference});
}

// Shapes read from tensors (Shape/Gather/Concat chains), buffers sliced and expanded, the
// finfo.min mask, x[:, 0]: folded at import, the rest run as ops.
TEST_CASE("BERT as Hugging Face writes it, at opset 17, answers as PyTorch does") {
  CheckModel("bert", {CpuMode::kFast, CpuMode::kReference});
}

TEST_CASE("the same BERT at opset 14 (layer norm as ReduceMean, Pow, Sqrt, Div) as PyTorch") {
  CheckModel("bert_opset14", {CpuMode::kFast, CpuMode::kReference});
}

TEST_CASE("a CNN with batch norm and an MLP with batch and layer norm answer as PyTorch does") {
  CheckModel("cnn", {CpuMode::kFast, CpuMode::kReference});
  CheckModel("mlp", {CpuMode::kFast, CpuMode::kReference});
}

}  // namespace
}  // namespace ferry
