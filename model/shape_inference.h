// Shape inference over a manifest's program for one (variant, batch size): the check that a
// bundle's program, weights and declared outputs agree before anything runs.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/result.h"
#include "model/manifest.h"

namespace ferry {

struct WeightSpec {
  DType dtype;
  Shape shape;
};
// A gather table's rows at most: indices reach programs as FP32, exact to 2^24.
inline constexpr int64_t kMaxGatherRows = int64_t{1} << 24;

// Finds a weight by safetensors name; nullopt when the file has none of that name.
using WeightLookup = std::function<std::optional<WeightSpec>(const std::string&)>;

// The concrete shape of every tensor (inputs, intermediates, outputs) for `batch` rows of
// `variant` (batch is ignored for tensors without a batch dimension). Checks each op's
// operands and weights and that every declared output has its declared shape. Errors name
// the model, variant, batch size, op index and tensor.
Result<std::map<std::string, Shape>> InferShapes(const Manifest& manifest,
                                                 const ShapeVariant& variant, int64_t batch,
                                                 const WeightLookup& weights);

std::string ShapeToString(const Shape& shape);  // "[4, 784]"

// The output size of a window of `kernel` at `stride` over `size` padded by `pad` each side:
// rounded down, or with `ceil` up, dropping a last window that would start in the right
// padding (PyTorch's and ONNX's ceil_mode).
// REQUIRES: size + 2 pad >= kernel >= 1, stride >= 1.
int64_t PooledSize(int64_t size, int64_t kernel, int64_t stride, int64_t pad, bool ceil);

// Product of the dimensions; nullopt when it would exceed 2^40 elements.
std::optional<int64_t> NumElements(const Shape& shape);

}  // namespace ferry
