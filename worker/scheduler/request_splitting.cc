#include "worker/scheduler/request_splitting.h"

#include <string>

namespace ferry {

Result<std::vector<int64_t>> PlanSplit(std::string_view model, int64_t rows, int64_t largest_size,
                                       std::string_view cannot_split, size_t max_pieces) {
  if (largest_size <= 0 || rows <= largest_size) {
    return std::vector<int64_t>{rows};
  }
  std::string where = "model '" + std::string(model) + "': " + std::to_string(rows) +
                      " rows exceed the largest compiled batch size " +
                      std::to_string(largest_size);
  if (!cannot_split.empty()) {
    return InvalidArgument(where + ", and " + std::string(cannot_split) +
                           ", so it cannot be split");
  }
  auto count = static_cast<size_t>((rows + largest_size - 1) / largest_size);
  if (count > max_pieces) {
    return InvalidArgument(where + ", and its " + std::to_string(count) + " pieces are more than " +
                           std::to_string(max_pieces) + " (the most one request may be cut into)");
  }
  std::vector<int64_t> pieces(static_cast<size_t>(rows / largest_size), largest_size);
  if (rows % largest_size != 0) {
    pieces.push_back(rows % largest_size);
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
