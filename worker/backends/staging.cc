#include "worker/backends/staging.h"

#include <cstring>

#include "model/dtype_convert.h"
#include "model/shape_inference.h"
#include "worker/scheduler/batch_axis.h"

namespace ferry {
namespace {

constexpr uint64_t kAlign = 256;

Result<StagingLayout::Tensor> Place(const Manifest& manifest, const TensorSpec& spec,
                                    const Shape& shape, uint64_t* at) {
  StagingLayout::Tensor t;
  std::optional<int64_t> count = NumElements(shape);
  if (!count) {
    return InvalidArgument("tensor '" + spec.name + "': element count overflows");
  }
  int bits = DTypeBits(spec.dtype);
  if (bits <= 0 || bits % 8 != 0 || spec.dtype == DType::kBytes) {
    return InvalidArgument("tensor '" + spec.name + "': " + std::string(KServeName(spec.dtype)) +
                           " cannot be staged");
  }
  auto element = static_cast<uint64_t>(bits / 8);
  auto align = [](uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; };
  t.dtype = spec.dtype;
  t.offset = *at;
  t.bytes = static_cast<uint64_t>(*count) * element;
  if (spec.batch_axis && !manifest.unbatched()) {
    FERRY_ASSIGN_OR_RETURN(RowLayout rows,
                           RowLayoutOf(shape, *spec.batch_axis, static_cast<int>(element)));
    t.outer = rows.outer;
    t.row_bytes = rows.row_bytes;
  }
  *at += align(t.bytes);
  t.device_offset = t.offset;
  t.device_bytes = t.bytes;
  if (spec.dtype != DType::kF32) {
    t.device_offset = *at;
    t.device_bytes = static_cast<uint64_t>(*count) * 4;
    *at += align(t.device_bytes);
  }
  return t;
}

}  // namespace

Result<StagingLayout> PlanStaging(const Manifest& manifest,
                                  const std::map<std::string, Shape>& shapes) {
  StagingLayout layout;
  uint64_t at = 0;
  for (const TensorSpec& spec : manifest.inputs) {
    FERRY_ASSIGN_OR_RETURN(StagingLayout::Tensor t,
                           Place(manifest, spec, shapes.at(spec.name), &at));
    layout.inputs.push_back(t);
  }
  for (const TensorSpec& spec : manifest.outputs) {
    FERRY_ASSIGN_OR_RETURN(StagingLayout::Tensor t,
                           Place(manifest, spec, shapes.at(spec.name), &at));
    layout.outputs.push_back(t);
  }
  layout.total_bytes = at;
  return layout;
}

void GatherRows(const BatchJob& job, size_t i, int64_t outer, int64_t row_bytes,
                std::span<uint8_t> dst) {
  uint8_t* at = dst.data();
  if (row_bytes == 0) {  // No batch axis: the first request's tensor.
    std::memcpy(at, job.requests[0].inputs[i].data(), dst.size());
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    int64_t filled = 0;
    for (const RequestIo& io : job.requests) {
      size_t block = static_cast<size_t>(io.rows * row_bytes);
      std::memcpy(at, io.inputs[i].data() + static_cast<size_t>(o) * block, block);
      at += block;
      filled += io.rows;
    }
    size_t pad = static_cast<size_t>((job.batch_size - filled) * row_bytes);
    std::memset(at, 0, pad);
    at += pad;
  }
}

void ScatterRows(const BatchJob& job, size_t o, int64_t outer, int64_t row_bytes,
                 std::span<const uint8_t> src) {
  if (row_bytes == 0) {
    std::memcpy(job.requests[0].outputs[o].data(), src.data(), src.size());
    return;
  }
  int64_t begin = 0;
  for (const RequestIo& io : job.requests) {
    size_t block = static_cast<size_t>(io.rows * row_bytes);
    for (int64_t b = 0; b < outer; ++b) {
      std::memcpy(io.outputs[o].data() + static_cast<size_t>(b) * block,
                  src.data() + (b * job.batch_size + begin) * row_bytes, block);
    }
    begin += io.rows;
  }
}

void GatherInput(const StagingLayout& layout, const BatchJob& job, size_t i,
                 std::span<uint8_t> staging) {
  const StagingLayout::Tensor& t = layout.inputs[i];
  GatherRows(job, i, t.outer, t.row_bytes, staging.subspan(t.offset, t.bytes));
}

void ScatterOutput(const StagingLayout& layout, const BatchJob& job, size_t o,
                   std::span<const uint8_t> staging) {
  const StagingLayout::Tensor& t = layout.outputs[o];
  ScatterRows(job, o, t.outer, t.row_bytes, staging.subspan(t.offset, t.bytes));
}

namespace {

std::span<float> FloatRegion(const StagingLayout::Tensor& t, std::span<uint8_t> staging) {
  return {reinterpret_cast<float*>(staging.data() + t.device_offset), t.device_bytes / 4};
}

}  // namespace

Status ConvertStagedInput(const StagingLayout& layout, size_t i, std::span<uint8_t> staging) {
  const StagingLayout::Tensor& t = layout.inputs[i];
  if (t.dtype == DType::kF32) {
    return OkStatus();
  }
  return ConvertToFloat32(t.dtype, staging.subspan(t.offset, t.bytes), FloatRegion(t, staging));
}

Status ConvertStagedOutput(const StagingLayout& layout, size_t o, std::span<uint8_t> staging) {
  const StagingLayout::Tensor& t = layout.outputs[o];
  if (t.dtype == DType::kF32) {
    return OkStatus();
  }
  return ConvertFromFloat32(t.dtype, FloatRegion(t, staging), staging.subspan(t.offset, t.bytes));
}

}  // namespace ferry
