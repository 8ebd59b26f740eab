// Staging a batch through one contiguous host buffer: every request's input rows gathered
// into the batch layout (zero padding rows after them), and every request's output rows
// scattered back from it. A GPU backend copies each input to the device with ONE host-to-device
// copy from the (pinned) staging buffer and each output back with one device-to-host copy,
// instead of one 2-D copy per request per tensor plus a memset for the padding: host work per
// dispatch then does not grow with API calls per request.
//
// Pure host code (no CUDA), so it is tested and benchmarked without a GPU.
// Thread safety: pure functions; safe for concurrent use on distinct buffers.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"
#include "worker/backends/backend.h"

namespace ferry {

// Where each tensor of one (variant, compiled size) sits in the staging buffer: inputs first,
// then outputs, each 256-byte aligned. Built once per executable, at load. A tensor is staged
// in its own type (what requests carry); one that is not FP32 also has an FP32 region, the
// one the device reads or writes (programs compute in FP32), converted on the host.
struct StagingLayout {
  struct Tensor {
    uint64_t offset = 0;    // In the staging buffer: the batch tensor in its own type.
    uint64_t bytes = 0;     // The whole batch tensor, in its own type.
    int64_t outer = 1;      // Blocks before the batch axis (1 for axis 0).
    int64_t row_bytes = 0;  // Bytes of one row within a block; 0: no batch axis.
    DType dtype = DType::kF32;
    uint64_t device_offset = 0;  // The FP32 batch tensor (== offset for FP32).
    uint64_t device_bytes = 0;   // Its bytes (== bytes for FP32).
  };
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  uint64_t total_bytes = 0;
};

// The batch tensor of input `i` assembled in `dst` (dst.size() bytes: the whole tensor at the
// compiled size): each of `outer` blocks holds every request's rows of `row_bytes`, then zero
// padding rows. row_bytes == 0: no batch axis, the first request's tensor is copied.
// REQUIRES: ValidateJob(job) passed and dst is the batch tensor's size.
void GatherRows(const BatchJob& job, size_t i, int64_t outer, int64_t row_bytes,
                std::span<uint8_t> dst);
// The inverse for output `o`: each request's rows copied from `src` into its block.
void ScatterRows(const BatchJob& job, size_t o, int64_t outer, int64_t row_bytes,
                 std::span<const uint8_t> src);

// `shapes` holds the concrete shape of every tensor at this (variant, size).
Result<StagingLayout> PlanStaging(const Manifest& manifest,
                                  const std::map<std::string, Shape>& shapes);

// Gathers input `i` of every request of `job` into `staging` at the layout's place; zeroes
// the padding rows. REQUIRES: ValidateJob(job) passed; staging.size() >= layout.total_bytes.
void GatherInput(const StagingLayout& layout, const BatchJob& job, size_t i,
                 std::span<uint8_t> staging);
// Scatters output `o` from `staging` into every request's output block.
void ScatterOutput(const StagingLayout& layout, const BatchJob& job, size_t o,
                   std::span<const uint8_t> staging);
// Input `i` gathered in its own type converted into its FP32 region (nothing for FP32), and
// output `o`'s FP32 region converted to its own type (ConvertToFloat32 / ConvertFromFloat32).
Status ConvertStagedInput(const StagingLayout& layout, size_t i, std::span<uint8_t> staging);
Status ConvertStagedOutput(const StagingLayout& layout, size_t o, std::span<uint8_t> staging);

}  // namespace ferry
