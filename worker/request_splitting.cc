#include "worker/request_splitting.h"

namespace ferry {

std::vector<int64_t> PlanSplit(int64_t rows, int64_t largest_size, bool preserves_rows,
                               bool all_outputs_batched) {
  if (rows <= largest_size || largest_size <= 0 || !preserves_rows || !all_outputs_batched) {
    return {rows};
  }
  std::vector<int64_t> pieces;
  for (int64_t left = rows; left > 0; left -= largest_size) {
    pieces.push_back(left < largest_size ? left : largest_size);
  }
  return pieces;
}

std::vector<QueuedRequest> SplitRequest(const QueuedRequest& whole,
                                        const std::vector<int64_t>& pieces) {
  std::vector<QueuedRequest> out;
  out.reserve(pieces.size());
  for (int64_t rows : pieces) {
    QueuedRequest piece = whole;
    piece.rows = rows;
    out.push_back(std::move(piece));
  }
  return out;
}

std::vector<Bytes> SplitTensor(ByteView tensor, const std::vector<int64_t>& pieces,
                               const RowLayout& layout) {
  int64_t total = 0;
  for (int64_t rows : pieces) {
    total += rows;
  }
  std::vector<Bytes> out;
  int64_t begin = 0;
  for (int64_t rows : pieces) {
    out.push_back(SliceRows(tensor, total, begin, rows, layout));
    begin += rows;
  }
  return out;
}

Bytes JoinPieces(const std::vector<Bytes>& outputs, const std::vector<int64_t>& pieces,
                 const RowLayout& layout) {
  std::vector<ByteView> views(outputs.begin(), outputs.end());
  return ConcatRows(views, pieces, layout, 0);
}

}  // namespace ferry
