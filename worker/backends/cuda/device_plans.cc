#include "worker/backends/cuda/device_plans.h"

#include <algorithm>
#include <string>

namespace ferry::cuda {
namespace {

std::string Text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(s[i]);
  }
  return out + "]";
}

// Row-major element strides of `shape` aligned at the right of `y`, 0 where it broadcasts.
Status AlignStrides(const Shape& shape, const Shape& y, int64_t* strides) {
  if (shape.size() > y.size()) {
    return InvalidArgument("shape " + Text(shape) + " does not broadcast to " + Text(y));
  }
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    size_t axis = y.size() - shape.size() + i;
    if (shape[i] != 1 && shape[i] != y[axis]) {
      return InvalidArgument("shape " + Text(shape) + " does not broadcast to " + Text(y));
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
    return InvalidArgument("a transpose of " + Text(x) + " by " + std::to_string(perm.size()) +
                           " axes");
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

uint64_t ArenaBytesFor(uint64_t free, uint64_t total) {
  uint64_t reserve = std::max<uint64_t>(total / 4, uint64_t{2} << 30);
  uint64_t arena = free > reserve ? free - reserve : 0;
  return std::max(arena, free / 2) / 256 * 256;
}

}  // namespace ferry::cuda
