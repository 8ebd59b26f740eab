// Moving rows along a tensor's batch axis: concatenating requests into one batch (with zero
// padding), handing each caller its slice of an output, and splitting / joining the pieces
// of an oversize request. Tensors are dense and row-major; the batch axis may be any axis.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "worker/scheduler/scheduler_types.h"

namespace ferry {

// A tensor seen as `outer` blocks, each holding rows of `row_bytes` along the batch axis:
// outer = product of the dims before the axis, row_bytes = product of the dims after it
// times the element size.
struct RowLayout {
  int64_t outer = 1;
  int64_t row_bytes = 0;
};

// INVALID_ARGUMENT when the axis is out of range or the sizes overflow.
Result<RowLayout> RowLayoutOf(const std::vector<int64_t>& shape, int axis, int element_bytes);

using Bytes = std::vector<uint8_t>;
using ByteView = std::span<const uint8_t>;

// Concatenates parts (part i holding rows[i] rows) and then pad_rows rows of zeros.
// REQUIRES: parts[i].size() == layout.outer * rows[i] * layout.row_bytes.
Bytes ConcatRows(std::span<const ByteView> parts, std::span<const int64_t> rows,
                 const RowLayout& layout, int64_t pad_rows);

// Rows [begin, begin + count) of a tensor holding total_rows rows.
// REQUIRES: begin + count <= total_rows; tensor.size() == outer * total_rows * row_bytes.
Bytes SliceRows(ByteView tensor, int64_t total_rows, int64_t begin, int64_t count,
                const RowLayout& layout);

// One input of a dispatch, ready for the executor: the caller's own bytes when the dispatch
// is a pass-through (no copy), else a concatenation padded to the compiled size.
struct BatchInput {
  ByteView view;
  Bytes storage;  // Empty for a pass-through.
};
// `per_request[i]` is request i's tensor (in dispatch order).
BatchInput AssembleInput(const Dispatch& dispatch, std::span<const ByteView> per_request,
                         const RowLayout& layout);

// Each request's slice of a batched output; padding rows are dropped.
std::vector<Bytes> ScatterOutput(const Dispatch& dispatch, ByteView output,
                                 const RowLayout& layout);

}  // namespace ferry
