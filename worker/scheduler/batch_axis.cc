#include "worker/scheduler/batch_axis.h"

#include <algorithm>
#include <cstring>

namespace ferry {

Result<RowLayout> RowLayoutOf(const std::vector<int64_t>& shape, int axis, int element_bytes) {
  if (axis < 0 || static_cast<size_t>(axis) >= shape.size()) {
    return InvalidArgument("batch axis " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(shape.size()));
  }
  RowLayout layout;
  int64_t row = element_bytes;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return InvalidArgument("negative dimension in shape");
    }
    if (static_cast<int>(i) == axis) {
      continue;
    }
    int64_t& target = static_cast<int>(i) < axis ? layout.outer : row;
    if (__builtin_mul_overflow(target, shape[i], &target)) {
      return InvalidArgument("tensor size overflows");
    }
  }
  layout.row_bytes = row;
  return layout;
}

Bytes ConcatRows(std::span<const ByteView> parts, std::span<const int64_t> rows,
                 const RowLayout& layout, int64_t pad_rows) {
  int64_t total_rows = pad_rows;
  for (int64_t r : rows) {
    total_rows += r;
  }
  Bytes out(static_cast<size_t>(layout.outer * total_rows * layout.row_bytes), 0);
  uint8_t* dst = out.data();
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (size_t p = 0; p < parts.size(); ++p) {
      size_t block = static_cast<size_t>(rows[p] * layout.row_bytes);
      if (block > 0) {
        std::memcpy(dst, parts[p].data() + static_cast<size_t>(o) * block, block);
      }
      dst += block;
    }
    dst += pad_rows * layout.row_bytes;  // Already zero.
  }
  return out;
}

Bytes SliceRows(ByteView tensor, int64_t total_rows, int64_t begin, int64_t count,
                const RowLayout& layout) {
  size_t block = static_cast<size_t>(count * layout.row_bytes);
  Bytes out(static_cast<size_t>(layout.outer) * block);
  for (int64_t o = 0; o < layout.outer; ++o) {
    const uint8_t* src = tensor.data() + (o * total_rows + begin) * layout.row_bytes;
    if (block > 0) {
      std::memcpy(out.data() + static_cast<size_t>(o) * block, src, block);
    }
  }
  return out;
}

BatchInput AssembleInput(const Dispatch& dispatch, std::span<const ByteView> per_request,
                         const RowLayout& layout) {
  BatchInput input;
  if (dispatch.pass_through) {
    input.view = per_request[0];
    return input;
  }
  std::vector<int64_t> rows;
  rows.reserve(dispatch.requests.size());
  for (const QueuedRequest& r : dispatch.requests) {
    rows.push_back(r.rows);
  }
  input.storage = ConcatRows(per_request, rows, layout,
                             std::max<int64_t>(0, dispatch.batch_size - dispatch.rows));
  input.view = input.storage;
  return input;
}

std::vector<Bytes> ScatterOutput(const Dispatch& dispatch, ByteView output,
                                 const RowLayout& layout) {
  std::vector<Bytes> slices;
  if (dispatch.batch_size == 0) {  // Unbatched module: one request, the whole tensor.
    slices.emplace_back(output.begin(), output.end());
    return slices;
  }
  int64_t begin = 0;
  for (const QueuedRequest& r : dispatch.requests) {
    slices.push_back(SliceRows(output, dispatch.batch_size, begin, r.rows, layout));
    begin += r.rows;
  }
  return slices;
}

}  // namespace ferry
