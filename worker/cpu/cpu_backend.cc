#include "worker/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "model/dtype_convert.h"
#include "model/shape_inference.h"
#include "worker/batch_axis.h"
#include "worker/cpu/ops.h"

namespace ferry {

CpuBackend::CpuBackend(unsigned threads) : pool_(threads) {}

Result<ModelHandle> CpuBackend::Load(const Bundle& bundle) {
  ModelHandle handle = static_cast<ModelHandle>(models_.size());
  models_.emplace_back();
  Model& model = models_.back();
  model.bundle = &bundle;
  auto fail = [&](Error error) -> Result<ModelHandle> {
    model.failure = error;
    return error;
  };
  for (const TensorInfo& tensor : bundle.weights.index().tensors) {
    Result<std::vector<float>> values = ToFloat32(tensor.dtype, bundle.weights.Data(tensor));
    if (!values.ok()) {
      return fail(InvalidArgument("model '" + bundle.manifest.name + "': weight '" + tensor.name +
                                  "': " + values.error().message));
    }
    model.weights[tensor.name] = std::move(*values);
  }
  WeightLookup lookup = [&bundle](const std::string& name) -> std::optional<WeightSpec> {
    const TensorInfo* info = bundle.weights.index().Find(name);
    return info ? std::optional<WeightSpec>(WeightSpec{info->dtype, info->shape}) : std::nullopt;
  };
  for (const ShapeVariant& variant : bundle.manifest.variants) {
    for (int64_t size : bundle.manifest.batch_sizes) {
      Result<std::map<std::string, Shape>> shapes =
          InferShapes(bundle.manifest, variant, size, lookup);
      if (!shapes.ok()) {
        return fail(shapes.error());
      }
      model.shapes.push_back(std::move(*shapes));
    }
  }
  return handle;
}

Status CpuBackend::ModelStatus(ModelHandle model) const {
  if (model < 0 || static_cast<size_t>(model) >= models_.size()) {
    return NotFound("cpu backend: no model " + std::to_string(model));
  }
  const Model& m = models_[static_cast<size_t>(model)];
  if (m.failure) {
    return *m.failure;
  }
  return OkStatus();
}

Status CpuBackend::RunProgram(const Model& model, const std::map<std::string, Shape>& shapes,
                              std::map<std::string, std::vector<float>>* values) {
  auto weight = [&](const std::string& name) -> std::span<const float> {
    if (name.empty()) {
      return {};
    }
    return model.weights.at(name);
  };
  for (const Op& op : model.bundle->manifest.program) {
    const std::vector<float>& x = values->at(op.inputs[0]);
    const Shape& xs = shapes.at(op.inputs[0]);
    const Shape& ys = shapes.at(op.output);
    std::vector<float> y(static_cast<size_t>(*NumElements(ys)));
    switch (op.kind) {
      case OpKind::kDense: {
        int64_t k = xs.back();
        int64_t n = ys.back();
        cpu::Dense(x, weight(op.weight), weight(op.bias), static_cast<int64_t>(x.size()) / k, k, n,
                   y, &pool_);
        break;
      }
      case OpKind::kRelu:
        cpu::Relu(x, y);
        break;
      case OpKind::kGelu:
        cpu::Gelu(x, y);
        break;
      case OpKind::kTanh:
        cpu::Tanh(x, y);
        break;
      case OpKind::kSigmoid:
        cpu::Sigmoid(x, y);
        break;
      case OpKind::kAdd:
        cpu::Add(x, values->at(op.inputs[1]), y);
        break;
      case OpKind::kSoftmax:
        cpu::Softmax(x, xs, op.axis, y);
        break;
      case OpKind::kLayerNorm:
        cpu::LayerNorm(x, xs.back(), weight(op.weight), weight(op.bias), op.eps, y);
        break;
      case OpKind::kConv2d: {
        const TensorInfo* info = model.bundle->weights.index().Find(op.weight);
        cpu::Window window{{info->shape[2], info->shape[3]}, op.stride, op.padding};
        cpu::Conv2d(x, xs, weight(op.weight), info->shape, weight(op.bias), window, ys, y, &pool_);
        break;
      }
      case OpKind::kMaxPool2d:
        cpu::MaxPool2d(x, xs, {op.kernel, op.stride, op.padding}, ys, y);
        break;
      case OpKind::kGlobalAvgPool:
        cpu::GlobalAvgPool(x, xs, y);
        break;
      case OpKind::kFlatten:
      case OpKind::kReshape:
        y = x;  // Row-major: the bytes do not move.
        break;
    }
    (*values)[op.output] = std::move(y);
  }
  return OkStatus();
}

Result<ExecutionTiming> CpuBackend::Execute(ModelHandle handle, const BatchJob& job) {
  FERRY_RETURN_IF_ERROR(ModelStatus(handle));
  Model& model = models_[static_cast<size_t>(handle)];
  const Manifest& manifest = model.bundle->manifest;
  FERRY_RETURN_IF_ERROR(ValidateJob(manifest, job));
  auto start = std::chrono::steady_clock::now();
  size_t size_index = static_cast<size_t>(
      std::find(manifest.batch_sizes.begin(), manifest.batch_sizes.end(), job.batch_size) -
      manifest.batch_sizes.begin());
  const std::map<std::string, Shape>& shapes =
      model.shapes[static_cast<size_t>(job.variant) * manifest.batch_sizes.size() + size_index];

  std::vector<int64_t> rows;
  int64_t real_rows = 0;
  for (const RequestIo& io : job.requests) {
    rows.push_back(io.rows);
    real_rows += io.rows;
  }
  std::map<std::string, std::vector<float>> values;
  for (size_t i = 0; i < manifest.inputs.size(); ++i) {
    const TensorSpec& spec = manifest.inputs[i];
    const Shape& shape = shapes.at(spec.name);
    std::vector<float>& value = values[spec.name];
    value.resize(static_cast<size_t>(*NumElements(shape)));
    if (!spec.batch_axis || manifest.unbatched()) {
      std::memcpy(value.data(), job.requests[0].inputs[i].data(), value.size() * 4);
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(RowLayout layout, RowLayoutOf(shape, *spec.batch_axis, 4));
    std::vector<ByteView> parts;
    for (const RequestIo& io : job.requests) {
      parts.push_back(io.inputs[i]);
    }
    Bytes batch = ConcatRows(parts, rows, layout, job.batch_size - real_rows);
    std::memcpy(value.data(), batch.data(), batch.size());
  }
  FERRY_RETURN_IF_ERROR(RunProgram(model, shapes, &values));
  for (size_t o = 0; o < manifest.outputs.size(); ++o) {
    const TensorSpec& spec = manifest.outputs[o];
    const Shape& shape = shapes.at(spec.name);
    ByteView out(reinterpret_cast<const uint8_t*>(values.at(spec.name).data()),
                 values.at(spec.name).size() * 4);
    if (!spec.batch_axis || manifest.unbatched()) {
      std::memcpy(job.requests[0].outputs[o].data(), out.data(), out.size());
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(RowLayout layout, RowLayoutOf(shape, *spec.batch_axis, 4));
    int64_t begin = 0;
    for (const RequestIo& io : job.requests) {
      Bytes slice = SliceRows(out, job.batch_size, begin, io.rows, layout);
      std::memcpy(io.outputs[o].data(), slice.data(), slice.size());
      begin += io.rows;
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ExecutionTiming{seconds, 0.0};
}

}  // namespace ferry
