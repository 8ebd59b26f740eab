#include "worker/backends/cuda/device_plans.h"

#include <algorithm>
#include <set>
#include <string>

#include "common/extent_allocator.h"
#include "model/shape_inference.h"

namespace ferry::cuda {
namespace {

// Row-major element strides of `shape` aligned at the right of `y`, 0 where it broadcasts.
Status AlignStrides(const Shape& shape, const Shape& y, int64_t* strides) {
  if (shape.size() > y.size()) {
    return InvalidArgument("shape " + ShapeToString(shape) + " does not broadcast to " +
                           ShapeToString(y));
  }
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    size_t axis = y.size() - shape.size() + i;
    if (shape[i] != 1 && shape[i] != y[axis]) {
      return InvalidArgument("shape " + ShapeToString(shape) + " does not broadcast to " +
                             ShapeToString(y));
    }
    strides[axis] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return OkStatus();
}

}  // namespace

Result<StridedView> BroadcastView(const Shape& a, const Shape& b, const Shape& y) {
  if (y.size() > static_cast<size_t>(kMaxViewRank)) {
    return InvalidArgument("a broadcast of rank " + std::to_string(y.size()) + " (at most " +
                           std::to_string(kMaxViewRank) + ")");
  }
  StridedView v;
  v.rank = static_cast<int>(y.size());
  for (size_t d = 0; d < y.size(); ++d) {
    v.dims[d] = y[d];
  }
  FERRY_RETURN_IF_ERROR(AlignStrides(a, y, v.a));
  FERRY_RETURN_IF_ERROR(AlignStrides(b, y, v.b));
  if (v.rank == 0) {  // A scalar: one element, offset 0 in both.
    v.rank = 1;
    v.dims[0] = 1;
  }
  return v;
}

Result<StridedView> TransposeView(const Shape& x, const std::vector<int64_t>& perm) {
  size_t rank = x.size();
  if (rank > static_cast<size_t>(kMaxViewRank) || perm.size() != rank) {
    return InvalidArgument("a transpose of " + ShapeToString(x) + " by " +
                           std::to_string(perm.size()) + " axes");
  }
  int64_t strides[kMaxViewRank] = {};
  int64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    strides[i] = stride;
    stride *= x[i];
  }
  StridedView v;
  v.rank = static_cast<int>(rank);
  bool seen[kMaxViewRank] = {};
  for (size_t d = 0; d < rank; ++d) {
    int64_t from = perm[d];
    if (from < 0 || static_cast<size_t>(from) >= rank || seen[from]) {
      return InvalidArgument("transpose: perm is not a permutation of " + std::to_string(rank) +
                             " axes");
    }
    seen[from] = true;
    v.dims[d] = x[static_cast<size_t>(from)];
    v.a[d] = strides[from];
  }
  if (v.rank == 0) {
    v.rank = 1;
    v.dims[0] = 1;
  }
  return v;
}

BufferPlan PlanBuffers(const Manifest& manifest, const std::map<std::string, Shape>& shapes,
                       uint64_t alignment) {
  const auto& program = manifest.program;
  auto forever = static_cast<int64_t>(program.size()) + 1;
  std::map<std::string, int64_t> last;  // The op after which a tensor may go.
  for (const auto& [name, shape] : shapes) {
    last[name] = -1;
  }
  for (size_t i = 0; i < program.size(); ++i) {
    for (const std::string& in : program[i].inputs) {
      last[in] = std::max<int64_t>(last[in], static_cast<int64_t>(i) + 1);
    }
    last[program[i].output] =
        std::max<int64_t>(last[program[i].output], static_cast<int64_t>(i) + 1);
  }
  for (const TensorSpec& out : manifest.outputs) {
    last[out.name] = forever;
  }
  auto bytes = [&](const std::string& name) {  // Rounded up as the allocator rounds.
    uint64_t b = std::max<uint64_t>(static_cast<uint64_t>(*NumElements(shapes.at(name))) * 4, 1);
    return (b + alignment - 1) / alignment * alignment;
  };
  // First fit in a range that holds every tensor at once, so an extent is always found; the
  // plan's total is the furthest end used.
  uint64_t everything = 0;
  for (const auto& [name, shape] : shapes) {
    everything += bytes(name);
  }
  BufferPlan plan;
  ExtentAllocator extents(std::max(everything, alignment), alignment);
  std::map<int64_t, std::vector<std::string>> ending;  // Op index -> tensors freed after it.
  auto place = [&](const std::string& name) {
    if (plan.offsets.count(name) == 0 && shapes.count(name) > 0) {
      uint64_t at = *extents.Allocate(bytes(name));
      plan.offsets[name] = at;
      plan.total = std::max(plan.total, at + bytes(name));
      ending[last[name]].push_back(name);
    }
  };
  std::set<std::string> written;
  for (const Op& op : program) {
    written.insert(op.output);
  }
  for (const auto& [name, shape] : shapes) {  // Inputs, and anything no op writes: from the start.
    if (!written.count(name)) {
      place(name);
    }
  }
  for (size_t i = 0; i < program.size(); ++i) {
    place(program[i].output);
    for (const std::string& gone : ending[static_cast<int64_t>(i)]) {
      extents.Free(plan.offsets.at(gone));
    }
  }
  return plan;
}

uint64_t ArenaBytesFor(uint64_t free, uint64_t total) {
  uint64_t reserve = std::max<uint64_t>(total / 4, uint64_t{2} << 30);
  uint64_t arena = free > reserve ? free - reserve : 0;
  return std::max(arena, free / 2) / 256 * 256;
}

}  // namespace ferry::cuda
