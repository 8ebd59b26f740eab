#include "worker/backends/backend.h"

#include <algorithm>

#include "common/clock.h"

namespace ferry {
namespace {

const Shape& ShapeIn(const ShapeVariant& variant, const TensorSpec& spec, bool is_input) {
  return is_input ? variant.inputs.at(spec.name) : variant.outputs.at(spec.name);
}

}  // namespace

Status Backend::Begin(ModelHandle model, const BatchJob& job) {
  finished_ = ExecuteTimed(model, job);
  return OkStatus();
}

Result<ExecutionTiming> Backend::ExecuteTimed(ModelHandle model, const BatchJob& job) {
  int64_t started = MonotonicNs();
  Result<ExecutionTiming> result = Execute(model, job);
  if (result.ok() && result->finished_ns == 0) {
    result->started_ns = started;
    result->finished_ns = MonotonicNs();
  }
  return result;
}

Result<ExecutionTiming> Backend::Finish() {
  Result<ExecutionTiming> result = std::move(*finished_);
  finished_.reset();
  return result;
}

int64_t RowBytes(const Manifest& manifest, const TensorSpec& spec, const ShapeVariant& variant,
                 bool is_input) {
  int64_t bytes = DTypeBits(spec.dtype) / 8;
  for (int64_t d : ShapeIn(variant, spec, is_input)) {
    if (d != kBatchDim && __builtin_mul_overflow(bytes, d, &bytes)) {
      return -1;  // Overflows: no span can match (a loaded bundle never gets here).
    }
  }
  return bytes;
}

int64_t RequestBytes(const Manifest& manifest, const TensorSpec& spec, const ShapeVariant& variant,
                     bool is_input, int64_t rows) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(RowBytes(manifest, spec, variant, is_input),
                             spec.batch_axis ? rows : 1, &bytes)) {
    return -1;
  }
  return bytes;
}

Status ValidateJob(const Manifest& manifest, const BatchJob& job) {
  // Messages are built only on failure: the valid path allocates nothing.
  auto where = [&] { return "model '" + manifest.name + "': "; };
  if (job.variant < 0 || static_cast<size_t>(job.variant) >= manifest.variants.size()) {
    return InvalidArgument(where() + "no shape variant " + std::to_string(job.variant));
  }
  if (std::find(manifest.batch_sizes.begin(), manifest.batch_sizes.end(), job.batch_size) ==
      manifest.batch_sizes.end()) {
    return InvalidArgument(where() + "no compiled batch size " + std::to_string(job.batch_size));
  }
  if (job.requests.empty()) {
    return InvalidArgument(where() + "a batch needs at least one request");
  }
  const ShapeVariant& variant = manifest.variants[static_cast<size_t>(job.variant)];
  int64_t rows = 0;
  for (size_t r = 0; r < job.requests.size(); ++r) {
    const RequestIo& io = job.requests[r];
    auto at = [&] { return where() + "request " + std::to_string(r) + ": "; };
    if (io.rows < 1 || (!manifest.unbatched() && io.rows > job.batch_size)) {
      return InvalidArgument(at() + "rows must be in [1, " + std::to_string(job.batch_size) +
                             "], got " + std::to_string(io.rows));
    }
    rows += io.rows;
    if (io.inputs.size() != manifest.inputs.size() ||
        io.outputs.size() != manifest.outputs.size()) {
      return InvalidArgument(at() + "expected " + std::to_string(manifest.inputs.size()) +
                             " inputs and " + std::to_string(manifest.outputs.size()) + " outputs");
    }
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      const TensorSpec& spec = manifest.inputs[i];
      int64_t want = RequestBytes(manifest, spec, variant, true, io.rows);
      if (want <= 0 || static_cast<int64_t>(io.inputs[i].size()) != want) {
        return InvalidArgument(at() + "input '" + spec.name + "' has " +
                               std::to_string(io.inputs[i].size()) + " bytes, expected " +
                               std::to_string(want));
      }
    }
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      const TensorSpec& spec = manifest.outputs[o];
      int64_t want = RequestBytes(manifest, spec, variant, false, io.rows);
      if (want <= 0 || static_cast<int64_t>(io.outputs[o].size()) != want) {
        return InvalidArgument(at() + "output '" + spec.name + "' has room for " +
                               std::to_string(io.outputs[o].size()) + " bytes, expected " +
                               std::to_string(want));
      }
    }
  }
  bool unbatched = manifest.unbatched();
  if (unbatched ? job.requests.size() != 1 : rows > job.batch_size) {
    return InvalidArgument(where() + std::to_string(rows) + " rows do not fit compiled size " +
                           std::to_string(job.batch_size));
  }
  return OkStatus();
}

}  // namespace ferry
