// A tensor viewed as [outer, n, inner] around one axis: what the ops along an axis (softmax,
// log_softmax, the reductions, arg_max, slice, concat) iterate over, on every backend.
//
// Thread safety: pure.
#pragma once

#include <cstdint>

#include "model/manifest.h"

namespace ferry {

struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;  // The axes before `axis`, the axis, the axes after it.
};

// REQUIRES: -rank <= axis < rank (negative counts from the end).
inline AxisSplit SplitAround(const Shape& shape, int64_t axis) {
  auto rank = static_cast<int64_t>(shape.size());
  int64_t a = axis < 0 ? axis + rank : axis;
  AxisSplit s;
  for (int64_t d = 0; d < a; ++d) s.outer *= shape[static_cast<size_t>(d)];
  for (int64_t d = a + 1; d < rank; ++d) s.inner *= shape[static_cast<size_t>(d)];
  s.n = shape[static_cast<size_t>(a)];
  return s;
}

}  // namespace ferry
