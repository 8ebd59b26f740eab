#include "worker/backends/cpu/cpu_backend.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "model/dtype_convert.h"
#include "model/shape_inference.h"
#include "worker/backends/cpu/imported_ops.h"
#include "worker/backends/cpu/ops.h"
#include "worker/backends/cpu/tensor_ops.h"
#include "worker/backends/staging.h"
#include "worker/scheduler/batch_axis.h"

namespace ferry {
namespace {

// Input `i` of every request into `batch` (the whole compiled batch), padding zeroed. An
// input that is not FP32 is gathered in its own type into `scratch`, then converted.
Status GatherInput(const Manifest& manifest, const BatchJob& job, size_t i, const Shape& shape,
                   std::span<float> batch, std::vector<uint8_t>* scratch) {
  const TensorSpec& spec = manifest.inputs[i];
  int element = DTypeBits(spec.dtype) / 8;
  RowLayout layout{1, 0};
  if (spec.batch_axis && !manifest.unbatched()) {
    FERRY_ASSIGN_OR_RETURN(layout, RowLayoutOf(shape, *spec.batch_axis, element));
  }
  if (spec.dtype == DType::kF32) {
    GatherRows(job, i, layout.outer, layout.row_bytes,
               std::span(reinterpret_cast<uint8_t*>(batch.data()), batch.size_bytes()));
    return OkStatus();
  }
  scratch->resize(batch.size() * static_cast<size_t>(element));
  GatherRows(job, i, layout.outer, layout.row_bytes, *scratch);
  return ConvertToFloat32(spec.dtype, *scratch, batch);
}

// Every request's rows of output `o` from `batch`, converted to the output's type (through
// `scratch`) when it is not FP32; padding rows are dropped.
Status ScatterOutput(const Manifest& manifest, const BatchJob& job, size_t o, const Shape& shape,
                     std::span<const float> batch, std::vector<uint8_t>* scratch) {
  const TensorSpec& spec = manifest.outputs[o];
  int element = DTypeBits(spec.dtype) / 8;
  RowLayout layout{1, 0};
  if (spec.batch_axis && !manifest.unbatched()) {
    FERRY_ASSIGN_OR_RETURN(layout, RowLayoutOf(shape, *spec.batch_axis, element));
  }
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(batch.data()),
                                 batch.size_bytes());
  if (spec.dtype != DType::kF32) {
    scratch->resize(batch.size() * static_cast<size_t>(element));
    FERRY_RETURN_IF_ERROR(ConvertFromFloat32(spec.dtype, batch, *scratch));
    bytes = *scratch;
  }
  ScatterRows(job, o, layout.outer, layout.row_bytes, bytes);
  return OkStatus();
}

// The ops imported models brought (imported_ops.h), on the reference path.
void RunImportedOp(const Op& op, std::span<const float> x, const Shape& xs, const Shape& ys,
                   const std::map<std::string, Shape>& shapes,
                   const std::map<std::string, std::vector<float>>& values, std::span<float> y) {
  switch (op.kind) {
    case OpKind::kLogSoftmax:
      cpu::LogSoftmax(x, xs, op.axis, y);
      return;
    case OpKind::kArgMax:
      cpu::ArgMax(x, xs, op.axis, op.last_index, y);
      return;
    case OpKind::kAvgPool2d:
      cpu::AvgPool2d(x, xs, {op.kernel, op.stride, op.padding}, op.count_pad, ys, y);
      return;
    case OpKind::kReduceMean:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
      cpu::Reduce(op.kind, x, xs, op.axis, y);
      return;
    case OpKind::kConcat: {
      std::vector<std::span<const float>> parts;
      std::vector<Shape> part_shapes;
      for (const std::string& in : op.inputs) {
        parts.emplace_back(values.at(in));
        part_shapes.push_back(shapes.at(in));
      }
      cpu::Concat(parts, part_shapes,
                  op.axis < 0 ? op.axis + static_cast<int64_t>(xs.size()) : op.axis, y);
      return;
    }
    default:  // The piecewise activations.
      cpu::Piecewise(op, x, y);
      return;
  }
}

}  // namespace

unsigned CpuThreads(unsigned requested) {
  if (requested != 0) {
    return requested;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

CpuBackend::CpuBackend(CpuOptions options)
    : options_(options),
      threads_(CpuThreads(options.threads)),
      pool_(options.mode == CpuMode::kReference ? threads_ : 1) {}

void CpuBackend::Unload(ModelHandle handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= models_.size()) {
    return;
  }
  Model& model = models_[static_cast<size_t>(handle)];
  FreeWeights(model);
  model.failure = NotFound("the model was unloaded");
}

void CpuBackend::FreeWeights(Model& model) {
  model.programs.clear();
  model.weights.clear();
  model.shapes.clear();
  model.resident = false;
}

Result<ModelHandle> CpuBackend::Load(const Bundle& bundle) {
  ModelHandle handle = static_cast<ModelHandle>(models_.size());
  models_.emplace_back();
  Model& model = models_.back();
  model.bundle = &bundle;
  for (const TensorInfo& tensor : bundle.weights.index().tensors) {
    uint64_t elements = 1;  // A scalar (no dimensions) is one element.
    for (int64_t d : tensor.shape) {
      elements *= static_cast<uint64_t>(d);
    }
    model.weight_bytes += elements * sizeof(float);
  }
  if (Status built = BuildWeights(model); !built.ok()) {
    model.failure = built.error();
    return built.error();
  }
  return handle;
}

Status CpuBackend::BuildWeights(Model& model) {
  const Bundle& bundle = *model.bundle;
  auto fail = [&](Error error) -> Status {
    FreeWeights(model);
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
  // oneDNN fixes a primitive's threading when it is created: build with the run's count.
  omp_set_num_threads(static_cast<int>(threads_));
  for (const ShapeVariant& variant : bundle.manifest.variants) {
    for (int64_t size : bundle.manifest.batch_sizes) {
      Result<std::map<std::string, Shape>> shapes =
          InferShapes(bundle.manifest, variant, size, lookup);
      if (!shapes.ok()) {
        return fail(shapes.error());
      }
      if (options_.mode == CpuMode::kFast) {
        Result<std::unique_ptr<cpu::FastProgram>> program =
            cpu::FastProgram::Build(bundle, *shapes, model.weights);
        if (!program.ok()) {
          return fail(program.error());
        }
        model.programs.push_back(std::move(*program));
      }
      model.shapes.push_back(std::move(*shapes));
    }
  }
  model.resident = true;
  return OkStatus();
}

uint64_t CpuBackend::WeightBytes(ModelHandle handle) const {
  if (handle < 0 || static_cast<size_t>(handle) >= models_.size()) {
    return 0;
  }
  return models_[static_cast<size_t>(handle)].weight_bytes;
}

void CpuBackend::ReleaseWeights(ModelHandle handle) {
  if (handle >= 0 && static_cast<size_t>(handle) < models_.size()) {
    FreeWeights(models_[static_cast<size_t>(handle)]);
  }
}

Status CpuBackend::RestoreWeights(ModelHandle handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= models_.size()) {
    return NotFound("cpu backend: no model " + std::to_string(handle));
  }
  Model& model = models_[static_cast<size_t>(handle)];
  if (model.failure) {
    return *model.failure;
  }
  if (model.resident) {
    return OkStatus();
  }
  return BuildWeights(model);
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

Status CpuBackend::RunReference(const Model& model, const std::map<std::string, Shape>& shapes,
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
      case OpKind::kClip:
        cpu::Clip(x, static_cast<float>(op.min), static_cast<float>(op.max), y);
        break;
      case OpKind::kAdd:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv: {
        bool weighted = op.inputs.size() == 1;
        std::span<const float> b = weighted ? weight(op.weight) : values->at(op.inputs[1]);
        const Shape& bs = weighted ? model.bundle->weights.index().Find(op.weight)->shape
                                   : shapes.at(op.inputs[1]);
        if (op.reverse) {
          cpu::Broadcast(op.kind, b, bs, x, xs, ys, y);
        } else {
          cpu::Broadcast(op.kind, x, xs, b, bs, ys, y);
        }
        break;
      }
      case OpKind::kTranspose:
        cpu::Transpose(x, xs, op.perm, y);
        break;
      case OpKind::kSlice:
        cpu::Slice(x, xs, op.axis < 0 ? op.axis + static_cast<int64_t>(xs.size()) : op.axis,
                   op.start, op.end, y);
        break;
      case OpKind::kSqrt:
      case OpKind::kExp:
      case OpKind::kLog:
        cpu::Elementwise(op.kind, x, y);
        break;
      case OpKind::kMatMul: {
        int64_t m = xs[xs.size() - 2], k = xs.back(), n = ys.back();
        cpu::BatchMatMul(x, values->at(op.inputs[1]), static_cast<int64_t>(x.size()) / (m * k), m,
                         k, n, y);
        break;
      }
      case OpKind::kSoftmax:
        cpu::Softmax(x, xs, op.axis, y);
        break;
      case OpKind::kLayerNorm:
        cpu::LayerNorm(x, xs.back(), weight(op.weight), weight(op.bias), op.eps, y);
        break;
      case OpKind::kConv2d: {
        const TensorInfo* info = model.bundle->weights.index().Find(op.weight);
        cpu::Window window{{info->shape[2], info->shape[3]}, op.stride, op.padding, op.groups};
        cpu::Conv2d(x, xs, weight(op.weight), info->shape, weight(op.bias), window, ys, y, &pool_);
        break;
      }
      case OpKind::kMaxPool2d:
        cpu::MaxPool2d(x, xs, {op.kernel, op.stride, op.padding}, ys, y);
        break;
      case OpKind::kGlobalAvgPool:
        cpu::GlobalAvgPool(x, xs, y);
        break;
      case OpKind::kGather: {
        const TensorInfo* info = model.bundle->weights.index().Find(op.weight);
        FERRY_RETURN_IF_ERROR(cpu::Gather(x, weight(op.weight), info->shape[0], info->shape[1], y));
        break;
      }
      case OpKind::kFlatten:
      case OpKind::kReshape:
        y = x;  // Row-major: the bytes do not move.
        break;
      case OpKind::kLeakyRelu:
      case OpKind::kHardSigmoid:
      case OpKind::kHardSwish:
      case OpKind::kLogSoftmax:
      case OpKind::kArgMax:
      case OpKind::kAvgPool2d:
      case OpKind::kReduceMean:
      case OpKind::kReduceSum:
      case OpKind::kReduceMax:
      case OpKind::kConcat:
        RunImportedOp(op, x, xs, ys, shapes, *values, y);
        break;
    }
    (*values)[op.output] = std::move(y);
  }
  return OkStatus();
}

Result<ExecutionTiming> CpuBackend::Execute(ModelHandle handle, const BatchJob& job) {
  FERRY_RETURN_IF_ERROR(ModelStatus(handle));
  Model& model = models_[static_cast<size_t>(handle)];
  if (!model.resident) {
    return Unavailable("model '" + model.bundle->manifest.name + "': its weights are not resident");
  }
  const Manifest& manifest = model.bundle->manifest;
  FERRY_RETURN_IF_ERROR(ValidateJob(manifest, job));
  auto start = std::chrono::steady_clock::now();
  size_t size_index = static_cast<size_t>(
      std::find(manifest.batch_sizes.begin(), manifest.batch_sizes.end(), job.batch_size) -
      manifest.batch_sizes.begin());
  size_t plan = static_cast<size_t>(job.variant) * manifest.batch_sizes.size() + size_index;
  const std::map<std::string, Shape>& shapes = model.shapes[plan];

  if (options_.mode == CpuMode::kFast) {
    cpu::FastProgram& program = *model.programs[plan];
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      FERRY_RETURN_IF_ERROR(GatherInput(manifest, job, i, shapes.at(manifest.inputs[i].name),
                                        program.Input(i), &scratch_));
    }
    omp_set_num_threads(static_cast<int>(threads_));
    FERRY_RETURN_IF_ERROR(program.Run());
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      FERRY_RETURN_IF_ERROR(ScatterOutput(manifest, job, o, shapes.at(manifest.outputs[o].name),
                                          program.Output(o), &scratch_));
    }
  } else {
    std::map<std::string, std::vector<float>> values;
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      const Shape& shape = shapes.at(manifest.inputs[i].name);
      std::vector<float>& value = values[manifest.inputs[i].name];
      value.resize(static_cast<size_t>(*NumElements(shape)));
      FERRY_RETURN_IF_ERROR(GatherInput(manifest, job, i, shape, value, &scratch_));
    }
    FERRY_RETURN_IF_ERROR(RunReference(model, shapes, &values));
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      const std::string& name = manifest.outputs[o].name;
      FERRY_RETURN_IF_ERROR(
          ScatterOutput(manifest, job, o, shapes.at(name), values.at(name), &scratch_));
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ExecutionTiming{seconds, 0.0};
}

}  // namespace ferry
