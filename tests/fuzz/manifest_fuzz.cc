// libFuzzer target: manifest parsing and shape inference on any text, against a weight
// lookup that answers every name with a plausible shape.
#include <cstdint>
#include <string_view>

#include "model/manifest.h"
#include "model/shape_inference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ferry::Result<ferry::Manifest> manifest = ferry::ParseManifest(text, "fuzz");
  if (!manifest.ok()) {
    return 0;
  }
  ferry::WeightLookup lookup = [](const std::string& name) -> std::optional<ferry::WeightSpec> {
    size_t h = std::hash<std::string>{}(name);
    ferry::Shape shape;
    for (size_t i = 0; i < 1 + h % 4; ++i) {
      shape.push_back(static_cast<int64_t>(1 + (h >> (i * 4)) % 16));
    }
    return ferry::WeightSpec{ferry::DType::kF32, shape};
  };
  for (const ferry::ShapeVariant& variant : manifest->variants) {
    for (int64_t size : manifest->batch_sizes) {
      (void)ferry::InferShapes(*manifest, variant, size, lookup);
    }
  }
  return 0;
}
