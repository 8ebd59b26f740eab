// Splitting a request larger than every compiled batch size into pieces that queue (and
// coalesce with other traffic) as separate requests, and joining their outputs. PlanSplit is
// the one rule for how a request is cut: the hook host (PieceRows, hookhost/request_checks.h)
// and the simulator (bench/sim) both call it, so the simulator models the path production
// takes, refusals included.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "worker/scheduler/batch_axis.h"
#include "worker/scheduler/scheduler_types.h"

namespace ferry {

// Piece row counts for a request of `rows` rows to `model` (named in messages) whose largest
// compiled batch size is `largest_size`: {rows} when it fits, or the model is unbatched
// (largest_size <= 0); otherwise pieces of `largest_size` rows and a final remainder, all or
// none. INVALID_ARGUMENT when it must be split and cannot: `cannot_split` non-empty says why
// ("its preprocess does not keep rows"), or it would take more than `max_pieces` pieces.
Result<std::vector<int64_t>> PlanSplit(std::string_view model, int64_t rows, int64_t largest_size,
                                       std::string_view cannot_split, size_t max_pieces);

// The pieces as queueable requests: each keeps the whole request's arrival and deadline.
std::vector<QueuedRequest> SplitRequest(const QueuedRequest& whole,
                                        const std::vector<int64_t>& pieces);

// One input tensor cut into pieces along its batch axis.
std::vector<Bytes> SplitTensor(ByteView tensor, const std::vector<int64_t>& pieces,
                               const RowLayout& layout);

// The pieces' outputs joined along the batch axis, in piece order.
Bytes JoinPieces(const std::vector<Bytes>& outputs, const std::vector<int64_t>& pieces,
                 const RowLayout& layout);

}  // namespace ferry
