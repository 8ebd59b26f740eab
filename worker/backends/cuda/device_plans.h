// Host-side plans for the CUDA backend's tensor kernels: the strided views of a broadcast
// binary op and of a transpose (device_math.h), built from the shapes shape inference gave.
// Pure host code (no CUDA), in ferry_backends, so it is tested without a GPU.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"
#include "worker/backends/axis_split.h"
#include "worker/backends/cuda/device_math.h"

namespace ferry::cuda {

// The view of y = a OP b with numpy broadcasting (a and b aligned at the right; an absent or
// size-1 axis repeated). INVALID_ARGUMENT when y has more than kMaxViewRank axes or a shape does
// not broadcast to y.
Result<StridedView> BroadcastView(const Shape& a, const Shape& b, const Shape& y);

// The view of y = transpose(x, perm) (y axis i is x axis perm[i]), reading operand A.
// INVALID_ARGUMENT when perm is not a permutation of x's axes or x has too many.
Result<StridedView> TransposeView(const Shape& x, const std::vector<int64_t>& perm);

// Where each tensor of one executable sits in its device buffer. Tensors whose lifetimes do
// not overlap share bytes: a tensor lives from the op that writes it (model inputs: from the
// start) until one op after its last reader (so a step that fuses two consecutive ops, as
// dense + activation does, never writes over what it reads); model outputs live to the end.
// Offsets are `alignment`-aligned; `total` is the buffer's size.
struct BufferPlan {
  std::map<std::string, uint64_t> offsets;
  uint64_t total = 0;
};
// REQUIRES: `shapes` holds every tensor the program reads or writes (InferShapes).
BufferPlan PlanBuffers(const Manifest& manifest, const std::map<std::string, Shape>& shapes,
                       uint64_t alignment);

// The weight arena a GPU worker takes at start: `free` device bytes less a reserve for
// activations, workspaces and the CUDA context of a quarter of `total` (at least 2 GiB), or
// half of `free` when that would leave less; 256-byte aligned.
uint64_t ArenaBytesFor(uint64_t free, uint64_t total);

}  // namespace ferry::cuda
