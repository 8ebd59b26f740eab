// What a hook host checks of a request before anything of it reaches a worker, and how it
// cuts an oversize request into pieces. Pure functions over the manifest.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"

namespace ferry::hookhost {

// A tensor as a request declares it: views of its name and shape (which must outlive it);
// its bytes are wherever they are.
struct TensorMeta {
  std::string_view name;
  DType dtype = DType::kF32;
  std::span<const int64_t> shape;
  uint64_t bytes = 0;
};

// For each of `specs`, the index in `given` of the tensor of that name. INVALID_ARGUMENT
// naming the model and the input missing, unknown or given twice.
// A plugin's output tensor fits its declaration: the same dtype and rank, every dimension
// equal except the batch one (kBatchDim).
bool FitsSpec(const TensorSpec& spec, DType dtype, const Shape& shape);

Result<std::vector<size_t>> OrderByName(std::string_view model,
                                        const std::vector<TensorSpec>& specs,
                                        std::span<const TensorMeta> given);

// Checks `tensors` (ordered as `specs`) against `declared` shapes (kBatchDim where the batch
// goes), dtype and byte count, and that every batched one carries the same rows (1 to
// shm::kMaxRowsPerRequest). Sets *rows (1 when no tensor has a batch axis). INVALID_ARGUMENT
// naming the model, the tensor, what was expected and what came.
Status CheckTensors(std::string_view model, const std::vector<TensorSpec>& specs,
                    std::span<const Shape> declared, std::span<const TensorMeta> tensors,
                    int64_t* rows);

// The first shape variant whose input shapes `tensors` (ordered as request_inputs()) have; sets
// *rows. An unbatched model takes exactly 1 row. INVALID_ARGUMENT as above, naming the
// variants when none matches.
Result<int> MatchVariant(std::string_view model, const Manifest& manifest,
                         std::span<const TensorMeta> tensors, int64_t* rows);

// Every value of each integer input that declares a range (TensorSpec::range) lies in it:
// a gather's indices are checked here, per request, before they reach a worker, so one bad
// request never fails the batch it would have joined. `tensors` and `bytes` are ordered as
// `specs` and already passed CheckTensors. INVALID_ARGUMENT naming the model, input, element
// and value.
Status CheckRanges(std::string_view model, const std::vector<TensorSpec>& specs,
                   std::span<const TensorMeta> tensors,
                   std::span<const std::span<const uint8_t>> bytes);

// The rows of each piece of a request of `rows` (PlanSplit, worker/scheduler/request_splitting.h:
// one piece up to the largest compiled size, else pieces of that size and a last one with the
// rest). INVALID_ARGUMENT when it would have to be split but cannot: a tensor whose batch
// axis is not axis 0 (its rows are not contiguous), a plugin that does not keep rows
// (`rows_preserved` false), or more pieces than `max_pieces` (a ring's capacity: all pieces
// are sent at once).
Result<std::vector<int64_t>> PieceRows(std::string_view model, const Manifest& manifest,
                                       int64_t rows, bool rows_preserved, size_t max_pieces);

// "FP32 [-1, 784]".
std::string DescribeTensor(DType dtype, std::span<const int64_t> shape);

}  // namespace ferry::hookhost
