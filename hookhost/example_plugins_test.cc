// The example plugin (examples/hooks/image_classify.c) against values numpy computed in
// float64 (scripts/make_hook_reference.py -> tests/data/reference/image_classify.safetensors).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "hookhost/plugin.h"
#include "model/safetensors.h"

namespace ferry::hookhost {
namespace {

const char* kConfig = "mean=0.485,0.456,0.406 std=0.229,0.224,0.225 k=3";

struct Fixture {
  SafetensorsFile file =
      SafetensorsFile::Open("tests/data/reference/image_classify.safetensors").value();
  TensorView View(const std::string& name) const {
    const TensorInfo* info = file.index().Find(name);
    REQUIRE(info != nullptr);
    return {info->name, info->dtype, info->shape, file.Data(*info)};
  }
};

std::unique_ptr<PluginInstance> Load(const std::string& config) {
  std::shared_ptr<Plugin> plugin =
      Plugin::Open(std::string(FERRY_EXAMPLE_PLUGIN_DIR) + "/image_classify.so").value();
  Result<std::unique_ptr<PluginInstance>> instance = PluginInstance::Create(plugin, config);
  REQUIRE_MESSAGE(instance.ok(), (instance.ok() ? "" : instance.error().message));
  return std::move(*instance);
}

// Output buffers on the heap, as the test's allocator.
struct Heap {
  std::vector<std::vector<uint8_t>> buffers;
  OutputAllocator allocator() {
    return [this](uint32_t, DType dtype, const Shape& shape) -> std::optional<AllocatedTensor> {
      std::optional<uint64_t> bytes = TensorByteSize(dtype, shape);
      if (!bytes) return std::nullopt;
      buffers.emplace_back(*bytes);
      return AllocatedTensor{dtype, shape, buffers.back(), buffers.size() - 1};
    };
  }
};

std::vector<float> Floats(std::span<const uint8_t> bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST_CASE("preprocess: uint8 HWC images become normalised float CHW, as numpy computes") {
  Fixture fx;
  std::unique_ptr<PluginInstance> plugin = Load(kConfig);
  CHECK(plugin->preserves_rows());
  Heap heap;
  std::vector<AllocatedTensor> out;
  TensorView image = fx.View("image");
  std::vector<std::string> names{"image"};
  REQUIRE(plugin->Preprocess(std::span(&image, 1), names, heap.allocator(), &out).ok());
  REQUIRE(out.size() == 1);
  CHECK(out[0].dtype == DType::kF32);
  CHECK(out[0].shape == Shape{4, 3, 32, 32});
  std::vector<float> got = Floats(out[0].bytes);
  std::vector<float> want = Floats(fx.View("preprocessed").bytes);
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  CHECK(worst < 1e-5);
}

void CheckTop3(PluginInstance& plugin, const Fixture& fx, const std::string& input,
               const std::string& scores_name, const std::string& classes_name) {
  Heap heap;
  std::vector<AllocatedTensor> out;
  TensorView probs = fx.View(input);
  std::vector<std::string> names{"scores", "classes"};
  Status s = plugin.Postprocess(std::span(&probs, 1), names, heap.allocator(), &out);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  REQUIRE(out.size() == 2);
  CHECK(out[0].shape == Shape{5, 3});
  CHECK(out[1].dtype == DType::kI64);
  std::vector<float> scores = Floats(out[0].bytes);
  std::vector<float> want = Floats(fx.View(scores_name).bytes);
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(std::fabs(scores[i] - want[i]) < 1e-6);
  }
  TensorView classes = fx.View(classes_name);
  CHECK(std::memcmp(out[1].bytes.data(), classes.bytes.data(), classes.bytes.size()) == 0);
}

TEST_CASE("postprocess: the top 3 classes and scores, ties to the lower class, as numpy finds") {
  Fixture fx;
  std::unique_ptr<PluginInstance> plugin = Load(kConfig);
  CheckTop3(*plugin, fx, "probs", "top3_scores", "top3_classes");
  std::unique_ptr<PluginInstance> with_softmax = Load(std::string(kConfig) + " softmax=1");
  CheckTop3(*with_softmax, fx, "logits", "softmax_top3_scores", "softmax_top3_classes");
}

TEST_CASE("the example plugin refuses a bad config and wrong tensors with its reason") {
  std::shared_ptr<Plugin> plugin =
      Plugin::Open(std::string(FERRY_EXAMPLE_PLUGIN_DIR) + "/image_classify.so").value();
  for (const char* bad : {"k=0", "k=65", "std=1,0,1", "softmax=2", "nonsense"}) {
    CAPTURE(bad);
    Result<std::unique_ptr<PluginInstance>> r = PluginInstance::Create(plugin, bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
    CHECK(r.error().message.find("bad config entry") != std::string::npos);
  }
  CHECK(PluginInstance::Create(plugin, "k=64").ok());
  std::unique_ptr<PluginInstance> instance = Load(kConfig);
  std::vector<uint8_t> bytes(4 * 4 * 4);
  TensorView wrong{"image", DType::kU8, {1, 4, 4, 4}, bytes};  // Four channels.
  Heap heap;
  std::vector<AllocatedTensor> out;
  std::vector<std::string> names{"image"};
  Status s = instance->Preprocess(std::span(&wrong, 1), names, heap.allocator(), &out);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == ErrorCode::kInvalidArgument);
  CHECK(s.error().message.find("expected one UINT8 image [N, H, W, 3]") != std::string::npos);
}

}  // namespace
}  // namespace ferry::hookhost
