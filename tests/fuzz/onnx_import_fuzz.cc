// libFuzzer target: the ONNX reader and converter must refuse or convert any bytes without
// crashing, hanging or reading out of bounds; a converted model must be one a bundle can hold
// (its manifest text parses, every weight the program names exists with as many values as its
// shape says).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>

#include "model/onnx/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry;
  Result<onnx_import::OnnxModel> model =
      onnx_import::ParseOnnx(std::span<const uint8_t>(data, size), "fuzz", "");
  if (!model.ok()) {
    return 0;
  }
  Result<onnx_import::ImportedModel> imported =
      onnx_import::ConvertOnnx(*model, onnx_import::ImportOptions{"fuzz", {1, 4}});
  if (!imported.ok()) {
    return 0;
  }
  std::map<std::string, const onnx_import::Weight*> weights;
  for (const onnx_import::Weight& w : imported->weights) {
    int64_t n = 1;
    for (int64_t d : w.shape) {
      n *= d;
    }
    if (n != static_cast<int64_t>(w.values.size()) || !weights.emplace(w.name, &w).second) {
      std::abort();  // A weight whose values do not match its shape, or a duplicate name.
    }
  }
  for (const Op& op : imported->manifest.program) {
    for (const std::string* name : {&op.weight, &op.bias}) {
      if (!name->empty() && weights.count(*name) == 0) {
        std::abort();  // The program names a weight that was not written.
      }
    }
  }
  if (!ParseManifest(onnx_import::ManifestToml(imported->manifest), "fuzz").ok()) {
    std::abort();  // The importer wrote a manifest the parser refuses.
  }
  return 0;
}
