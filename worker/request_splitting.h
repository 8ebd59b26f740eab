// Splitting a request larger than every compiled batch size into pieces that queue (and
// coalesce with other traffic) as separate requests, and joining their outputs. The hook host
// calls this before queueing; a request that cannot be split runs whole and fails with the
// shape error.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/batch_axis.h"
#include "worker/scheduler_types.h"

namespace ferry {

// Piece row counts: {rows} when the request fits `largest_size` or cannot be split;
// otherwise pieces of `largest_size` rows and a final remainder. Splitting is only sound when
// preprocess keeps one client row per executable row and every output has a batch axis.
std::vector<int64_t> PlanSplit(int64_t rows, int64_t largest_size, bool preserves_rows,
                               bool all_outputs_batched);

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
