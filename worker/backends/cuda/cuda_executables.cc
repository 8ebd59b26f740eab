// A model's program compiled into device steps (cuBLAS calls and ferry's kernels), captured
// as a CUDA graph per compiled batch size, and run on the backend's stream.
#include "worker/backends/axis_split.h"
#include "worker/backends/cuda/cuda_backend_impl.h"
#include "worker/backends/cuda/device_plans.h"

namespace ferry {
namespace {

// The elementwise kernel's function for an op of one input that computes elementwise.
cuda::Activation ElementwiseOf(OpKind kind) {
  switch (kind) {
    case OpKind::kRelu:
      return cuda::Activation::kRelu;
    case OpKind::kGelu:
      return cuda::Activation::kGelu;
    case OpKind::kTanh:
      return cuda::Activation::kTanh;
    case OpKind::kSigmoid:
      return cuda::Activation::kSigmoid;
    case OpKind::kLeakyRelu:
      return cuda::Activation::kLeakyRelu;
    case OpKind::kHardSigmoid:
      return cuda::Activation::kHardSigmoid;
    case OpKind::kHardSwish:
      return cuda::Activation::kHardSwish;
    case OpKind::kSqrt:
      return cuda::Activation::kSqrt;
    case OpKind::kExp:
      return cuda::Activation::kExp;
    case OpKind::kLog:
      return cuda::Activation::kLog;
    default:
      return cuda::Activation::kNone;
  }
}

bool AllFloat32(const Manifest& manifest) {
  auto f32 = [](const TensorSpec& t) { return t.dtype == DType::kF32; };
  return std::all_of(manifest.inputs.begin(), manifest.inputs.end(), f32) &&
         std::all_of(manifest.outputs.begin(), manifest.outputs.end(), f32);
}

}  // namespace

Status CudaBackend::Impl::BuildExecutable(const Model& m, const ShapeVariant& variant, int64_t size,
                                          Executable* exe) {
  const Manifest& manifest = m.bundle->manifest;
  WeightLookup lookup = [&](const std::string& name) -> std::optional<WeightSpec> {
    const TensorInfo* info = m.bundle->weights.index().Find(name);
    return info ? std::optional<WeightSpec>(WeightSpec{info->dtype, info->shape}) : std::nullopt;
  };
  FERRY_ASSIGN_OR_RETURN(auto shapes, InferShapes(manifest, variant, size, lookup));
  FERRY_ASSIGN_OR_RETURN(exe->staging, PlanStaging(manifest, shapes));
  if (exe->staging.total_bytes > options.staging_bytes && !AllFloat32(manifest)) {
    return ResourceExhausted("model '" + manifest.name + "', batch " + std::to_string(size) +
                             ": tensors that are not FP32 are converted in the staging buffer, " +
                             "which holds " + std::to_string(options.staging_bytes) +
                             " bytes; this batch needs " +
                             std::to_string(exe->staging.total_bytes));
  }
  // One buffer: the tensors (sharing bytes where their lifetimes allow, PlanBuffers), then the
  // bf16 scratch (as large as the largest dense input).
  cuda::BufferPlan plan = cuda::PlanBuffers(manifest, shapes, kDeviceAlignment);
  uint64_t total = AlignUp(plan.total, kDeviceAlignment), scratch = 0;
  const std::map<std::string, uint64_t>& offsets = plan.offsets;
  for (const Op& op : manifest.program) {
    if (op.kind == OpKind::kDense) {
      scratch = std::max<uint64_t>(
          scratch, static_cast<uint64_t>(*NumElements(shapes.at(op.inputs[0]))) * 2);
    }
  }
  FERRY_RETURN_IF_ERROR(
      Check(cudaMalloc(&exe->buffer, total + AlignUp(scratch, kDeviceAlignment) + kDeviceAlignment),
            "executable buffers"));
  FERRY_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(exe->buffer, 0, total, stream), "executable buffers"));
  FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "executable buffers"));
  auto* base = static_cast<uint8_t*>(exe->buffer);
  for (const auto& [name, shape] : shapes) {
    exe->tensors[name] = {reinterpret_cast<float*>(base + offsets.at(name)), shape};
  }
  exe->bf16_scratch = reinterpret_cast<uint16_t*>(base + total);
  FERRY_RETURN_IF_ERROR(BuildSteps(m, exe));
  // One plain run first: loads kernels and warms cuBLAS outside capture, and proves the
  // steps work before a graph is made of them.
  FERRY_RETURN_IF_ERROR(RunSteps(*exe));
  FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "first run"));
  if (options.use_graphs && !Capture(exe)) {
    // The executable keeps launching its steps one by one: slower, still correct.
    ++graph_fallbacks;
    spdlog::warn(
        "model '{}', batch {}: CUDA graph capture failed; launching the {} ops one "
        "by one",
        manifest.name, size, exe->steps.size());
  }
  return OkStatus();
}

// Translates the program into launch steps, fusing dense + bias + a following activation.
Status CudaBackend::Impl::BuildSteps(const Model& m, Executable* exe) {
  const auto& program = m.bundle->manifest.program;
  std::map<std::string, int> readers;
  for (const Op& op : program) {
    for (const std::string& in : op.inputs) {
      ++readers[in];
    }
  }
  for (size_t i = 0; i < program.size(); ++i) {
    const Op& op = program[i];
    if (op.kind == OpKind::kDense) {
      i = AddDenseStep(m, exe, i, readers);
    } else if (op.kind == OpKind::kConv2d || op.kind == OpKind::kMaxPool2d) {
      AddWindowStep(m, exe, op);
    } else if (!AddPointwiseStep(m, exe, op)) {
      FERRY_RETURN_IF_ERROR(AddTensorStep(m, exe, op));
    }
  }
  return OkStatus();
}

// A dense layer as one cuBLAS GEMM (in the manifest's precision), then its bias and the next
// op's activation when that op reads only its output. Returns the last op index covered.
size_t CudaBackend::Impl::AddDenseStep(const Model& m, Executable* exe, size_t i,
                                       std::map<std::string, int>& readers) {
  const Manifest& manifest = m.bundle->manifest;
  const auto& program = manifest.program;
  const Op& op = program[i];
  auto is_output = [&](const std::string& name) {
    for (const TensorSpec& t : manifest.outputs) {
      if (t.name == name) {
        return true;
      }
    }
    return false;
  };
  DeviceTensor x = exe->tensors.at(op.inputs[0]);
  DeviceTensor y = exe->tensors.at(op.output);
  int64_t count = *NumElements(y.shape);
  cuda::Activation act = cuda::Activation::kNone;
  if (i + 1 < program.size() && readers[op.output] == 1 && !is_output(op.output) &&
      program[i + 1].inputs[0] == op.output) {
    switch (program[i + 1].kind) {
      case OpKind::kRelu:
        act = cuda::Activation::kRelu;
        break;
      case OpKind::kGelu:
        act = cuda::Activation::kGelu;
        break;
      case OpKind::kTanh:
        act = cuda::Activation::kTanh;
        break;
      case OpKind::kSigmoid:
        act = cuda::Activation::kSigmoid;
        break;
      default:
        break;
    }
  }
  if (act != cuda::Activation::kNone) {
    y = exe->tensors.at(program[i + 1].output);  // Fused: write the activation's output.
    ++i;
  }
  int64_t k = x.shape.back(), n = y.shape.back(), rows = count / n;
  const DeviceWeight& w = m.weights.at(op.weight);
  const void* weight = arena_base + w.offset;
  const float* bias = WeightPtr(m, op.bias);
  Precision precision = manifest.precision;
  uint16_t* scratch = exe->bf16_scratch;
  exe->steps.push_back([=, this](cudaStream_t s) -> Status {
    const float alpha = 1.f, beta = 0.f;
    // Row-major y[rows, n] = x[rows, k] W[n, k]^T, as column-major y^T = W x^T.
    if (precision == Precision::kBf16) {
      FERRY_RETURN_IF_ERROR(Check(cuda::FloatToBf16(x.data, scratch, rows * k, s), "to bf16"));
      FERRY_RETURN_IF_ERROR(
          Check(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                             static_cast<int>(rows), static_cast<int>(k), &alpha, weight,
                             CUDA_R_16BF, static_cast<int>(k), scratch, CUDA_R_16BF,
                             static_cast<int>(k), &beta, y.data, CUDA_R_32F, static_cast<int>(n),
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "bf16 GEMM"));
    } else {
      cublasComputeType_t compute =
          precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      FERRY_RETURN_IF_ERROR(Check(
          cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                       static_cast<int>(rows), static_cast<int>(k), &alpha, weight, CUDA_R_32F,
                       static_cast<int>(k), x.data, CUDA_R_32F, static_cast<int>(k), &beta, y.data,
                       CUDA_R_32F, static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT),
          "GEMM"));
    }
    if (bias != nullptr || act != cuda::Activation::kNone) {
      return Check(cuda::BiasActivation(y.data, bias, rows, n, act, s), "bias/activation");
    }
    return OkStatus();
  });
  return i;
}

// Conv2d (on cuDNN when it runs, else the direct kernel) or maxpool2d over [N, C, H, W].
void CudaBackend::Impl::AddWindowStep(const Model& m, Executable* exe, const Op& op) {
  DeviceTensor x = exe->tensors.at(op.inputs[0]);
  DeviceTensor y = exe->tensors.at(op.output);
  cuda::ConvShape cs{};
  cs.groups = op.kind == OpKind::kConv2d ? op.groups : 1;
  cs.n = x.shape[0];
  cs.c = x.shape[1];
  cs.h = x.shape[2];
  cs.w = x.shape[3];
  cs.sh = op.stride[0];
  cs.sw = op.stride[1];
  cs.ph = op.padding[0];
  cs.pw = op.padding[1];
  cs.ho = y.shape[2];
  cs.wo = y.shape[3];
  if (op.kind == OpKind::kConv2d) {
    const DeviceWeight& w = m.weights.at(op.weight);
    cs.o = w.shape[0];
    cs.kh = w.shape[2];
    cs.kw = w.shape[3];
    const float* weight = WeightPtr(m, op.weight);
    const float* bias = WeightPtr(m, op.bias);
    if (cudnn != nullptr) {
      bool tf32 = m.bundle->manifest.precision != Precision::kFp32;
      auto step = cuda::CudnnConvStep(cudnn, cs, tf32, x.data, weight, bias, y.data);
      // Tried once here: an algorithm cuDNN offers may still fail at its first run (an engine
      // compiled at run time, say), and that must fall back, not fail the model.
      Status tried = step.ok() ? (*step)(stream) : Status(step.error());
      if (tried.ok() && cudaStreamSynchronize(stream) != cudaSuccess) {
        tried = Internal(std::string("first run: ") + cudaGetErrorString(cudaGetLastError()));
      }
      if (tried.ok()) {
        ++cudnn_convs;
        exe->steps.push_back(std::move(*step));
        return;
      }
      cudaGetLastError();
      ++cudnn_fallbacks;
      spdlog::info("model '{}': conv2d '{}' runs on the direct kernel: {}", m.bundle->manifest.name,
                   op.output, tried.error().message);
    }
    exe->steps.push_back([=, this](cudaStream_t s) {
      return Check(cuda::Conv2d(x.data, weight, bias, y.data, cs, s), "conv2d");
    });
  } else {
    cs.o = cs.c;
    cs.kh = op.kernel[0];
    cs.kw = op.kernel[1];
    exe->steps.push_back([=, this](cudaStream_t s) {
      return Check(cuda::MaxPool2d(x.data, y.data, cs, s), "maxpool2d");
    });
  }
}

// The activations, clip, softmax, layernorm, global pooling and reshapes, one kernel or copy
// each; false for any other op (AddTensorStep's).
bool CudaBackend::Impl::AddPointwiseStep(const Model& m, Executable* exe, const Op& op) {
  DeviceTensor x = exe->tensors.at(op.inputs[0]);
  DeviceTensor y = exe->tensors.at(op.output);
  int64_t count = *NumElements(y.shape);
  switch (op.kind) {
    case OpKind::kRelu:
    case OpKind::kGelu:
    case OpKind::kTanh:
    case OpKind::kSigmoid:
    case OpKind::kLeakyRelu:
    case OpKind::kHardSigmoid:
    case OpKind::kHardSwish:
    case OpKind::kSqrt:
    case OpKind::kExp:
    case OpKind::kLog: {
      cuda::Activation act = ElementwiseOf(op.kind);
      auto alpha = static_cast<float>(op.alpha), beta = static_cast<float>(op.beta);
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::Elementwise(x.data, y.data, count, act, s, alpha, beta), "activation");
      });
      break;
    }
    case OpKind::kClip: {
      auto lo = static_cast<float>(op.min), hi = static_cast<float>(op.max);
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::Clip(x.data, y.data, count, lo, hi, s), "clip");
      });
      break;
    }
    case OpKind::kSoftmax: {
      AxisSplit split = SplitAround(x.shape, op.axis);
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::Softmax(x.data, y.data, split.outer, split.n, split.inner, s),
                     "softmax");
      });
      break;
    }
    case OpKind::kLayerNorm: {
      const float* w = WeightPtr(m, op.weight);
      const float* b = WeightPtr(m, op.bias);
      int64_t d = x.shape.back();
      float eps = static_cast<float>(op.eps);
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::LayerNorm(x.data, w, b, y.data, count / d, d, eps, s), "layernorm");
      });
      break;
    }
    case OpKind::kGlobalAvgPool: {
      int64_t planes = x.shape[0] * x.shape[1], area = x.shape[2] * x.shape[3];
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::GlobalAvgPool(x.data, y.data, planes, area, s), "global_avgpool");
      });
      break;
    }
    case OpKind::kFlatten:
    case OpKind::kReshape:
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cudaMemcpyAsync(y.data, x.data, static_cast<size_t>(count) * 4,
                                     cudaMemcpyDeviceToDevice, s),
                     "reshape copy");
      });
      break;
    default:
      return false;
  }
  return true;
}

// Moves tensor `index` (an input when to_device, else an output) between every request's
// block and the device batch `t`, along the tensor's batch axis; pads inputs with zero
// rows up to the compiled size. A tensor without a batch axis is the first request's.
Status CudaBackend::Impl::CopyRows(const BatchJob& job, const Manifest& manifest,
                                   const TensorSpec& spec, const DeviceTensor& t, size_t index,
                                   bool to_device) {
  auto* device = reinterpret_cast<uint8_t*>(t.data);
  cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  const char* what = to_device ? "input copy" : "output copy";
  auto host = [&](const RequestIo& io) -> uint8_t* {
    return to_device ? const_cast<uint8_t*>(io.inputs[index].data()) : io.outputs[index].data();
  };
  if (!spec.batch_axis || manifest.unbatched()) {
    const RequestIo& io = job.requests[0];
    size_t bytes = to_device ? io.inputs[index].size() : io.outputs[index].size();
    return Check(to_device ? cudaMemcpyAsync(device, host(io), bytes, kind, stream)
                           : cudaMemcpyAsync(host(io), device, bytes, kind, stream),
                 what);
  }
  FERRY_ASSIGN_OR_RETURN(RowLayout layout, RowLayoutOf(t.shape, *spec.batch_axis, 4));
  size_t pitch = static_cast<size_t>(job.batch_size * layout.row_bytes);
  size_t height = static_cast<size_t>(layout.outer);
  int64_t begin = 0;
  for (const RequestIo& io : job.requests) {
    size_t width = static_cast<size_t>(io.rows * layout.row_bytes);
    uint8_t* rows = device + begin * layout.row_bytes;
    FERRY_RETURN_IF_ERROR(Check(
        to_device ? cudaMemcpy2DAsync(rows, pitch, host(io), width, width, height, kind, stream)
                  : cudaMemcpy2DAsync(host(io), width, rows, pitch, width, height, kind, stream),
        what));
    begin += io.rows;
  }
  if (to_device && begin < job.batch_size) {
    size_t pad = static_cast<size_t>((job.batch_size - begin) * layout.row_bytes);
    FERRY_RETURN_IF_ERROR(
        Check(cudaMemset2DAsync(device + begin * layout.row_bytes, pitch, 0, pad, height, stream),
              "zero padding rows"));
  }
  return OkStatus();
}

// One dispatch: inputs in, the program, outputs back, synchronised. Through the pinned
// staging buffer (one copy per tensor) when the batch fits it, else per request.
Status CudaBackend::Impl::Dispatch(const Executable& exe, const Manifest& manifest,
                                   const BatchJob& job) {
  const StagingLayout& layout = exe.staging;
  if (layout.total_bytes <= options.staging_bytes) {
    std::span<uint8_t> buffer(staging, options.staging_bytes);
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      GatherInput(layout, job, i, buffer);
      FERRY_RETURN_IF_ERROR(ConvertStagedInput(layout, i, buffer));
      const StagingLayout::Tensor& t = layout.inputs[i];
      FERRY_RETURN_IF_ERROR(Check(
          cudaMemcpyAsync(exe.tensors.at(manifest.inputs[i].name).data, staging + t.device_offset,
                          t.device_bytes, cudaMemcpyHostToDevice, stream),
          "input copy"));
    }
    FERRY_RETURN_IF_ERROR(Launch(exe, options.use_graphs));
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      const StagingLayout::Tensor& t = layout.outputs[o];
      FERRY_RETURN_IF_ERROR(Check(
          cudaMemcpyAsync(staging + t.device_offset, exe.tensors.at(manifest.outputs[o].name).data,
                          t.device_bytes, cudaMemcpyDeviceToHost, stream),
          "output copy"));
    }
    FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "dispatch"));
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      FERRY_RETURN_IF_ERROR(ConvertStagedOutput(layout, o, buffer));
      ScatterOutput(layout, job, o, buffer);
    }
    return OkStatus();
  }
  // Past the staging buffer every tensor is FP32 (BuildExecutable refuses the others).
  for (size_t i = 0; i < manifest.inputs.size(); ++i) {
    FERRY_RETURN_IF_ERROR(CopyRows(job, manifest, manifest.inputs[i],
                                   exe.tensors.at(manifest.inputs[i].name), i, true));
  }
  FERRY_RETURN_IF_ERROR(Launch(exe, options.use_graphs));
  for (size_t o = 0; o < manifest.outputs.size(); ++o) {
    FERRY_RETURN_IF_ERROR(CopyRows(job, manifest, manifest.outputs[o],
                                   exe.tensors.at(manifest.outputs[o].name), o, false));
  }
  return Check(cudaStreamSynchronize(stream), "dispatch");
}

Status CudaBackend::Impl::RunSteps(const Executable& exe) {
  for (const Step& step : exe.steps) {
    FERRY_RETURN_IF_ERROR(step(stream));
  }
  return OkStatus();
}

// Captures the steps as a graph; false on failure, when the partial graph is dropped, the
// error cleared, and exe->exec stays null (plain launches).
bool CudaBackend::Impl::Capture(Executable* exe) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  Status steps = RunSteps(*exe);
  cudaError_t end = cudaStreamEndCapture(stream, &exe->graph);
  if (steps.ok() && end == cudaSuccess &&
      cudaGraphInstantiate(&exe->exec, exe->graph, 0) == cudaSuccess) {
    return true;
  }
  cudaGetLastError();
  if (exe->graph != nullptr) {
    cudaGraphDestroy(exe->graph);
    exe->graph = nullptr;
  }
  exe->exec = nullptr;
  return false;
}

Status CudaBackend::Impl::Launch(const Executable& exe, bool graph) {
  if (graph && exe.exec != nullptr) {
    return Check(cudaGraphLaunch(exe.exec, stream), "graph launch");
  }
  return RunSteps(exe);
}

}  // namespace ferry
