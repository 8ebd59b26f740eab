#include "worker/backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "common/extent_allocator.h"
#include "model/dtype_convert.h"
#include "model/shape_inference.h"
#include "worker/backends/cuda/kernels.h"
#include "worker/backends/staging.h"
#include "worker/scheduler/batch_axis.h"

namespace ferry {
namespace {

constexpr uint64_t kDeviceAlignment = 256;
constexpr size_t kCublasWorkspace = 32 << 20;

bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
    case cudaErrorDevicesUnavailable:
      return true;
    default:
      return false;
  }
}

const char* CublasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_(other)";
  }
}

// A device tensor of an executable: its buffer and shape.
struct DeviceTensor {
  float* data = nullptr;
  Shape shape;
};

using Step = std::function<Status(cudaStream_t)>;

struct Executable {
  std::map<std::string, DeviceTensor> tensors;
  void* buffer = nullptr;            // Every tensor of this executable, one allocation.
  uint16_t* bf16_scratch = nullptr;  // Activations converted for bf16 GEMMs (in `buffer`).
  std::vector<Step> steps;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  StagingLayout staging;  // Where its inputs and outputs sit in the pinned staging buffer.
};

struct DeviceWeight {
  uint64_t offset = 0;
  bool bf16 = false;
  Shape shape;
};

struct Model {
  const Bundle* bundle = nullptr;
  std::map<std::string, DeviceWeight> weights;
  std::vector<Executable> executables;  // [variant * sizes + size index]
  std::optional<Error> failure;
};

class DeviceWeightArena : public WeightArena {
 public:
  DeviceWeightArena(uint8_t* base, uint64_t capacity)
      : base_(base), extents_(capacity / kDeviceAlignment * kDeviceAlignment, kDeviceAlignment) {}
  uint64_t capacity() const override { return extents_.capacity(); }
  std::optional<uint64_t> Allocate(uint64_t bytes) override { return extents_.Allocate(bytes); }
  void Free(uint64_t offset) override { extents_.Free(offset); }
  uint64_t in_use() const override { return extents_.in_use(); }
  uint8_t* base() const { return base_; }

 private:
  uint8_t* base_;
  ExtentAllocator extents_;
};

}  // namespace

struct CudaBackend::Impl {
  CudaBackendOptions options;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;
  uint8_t* arena_base = nullptr;
  std::unique_ptr<DeviceWeightArena> arena;
  uint8_t* staging = nullptr;
  std::vector<Model> models;
  std::atomic<bool> healthy{true};  // Written on the execution thread, read by the loop.
  double upload_seconds = 0;
  uint64_t uploaded_bytes = 0;
  uint64_t host_register_failures = 0;
  uint64_t graph_fallbacks = 0;

  // cudaSetDevice is per thread: every entry point selects the backend's device first.
  Status Select() { return Check(cudaSetDevice(options.device), "select device"); }

  // [offset, offset + bytes) inside the weight arena, overflow-checked.
  Status CheckArenaRange(uint64_t offset, uint64_t bytes, const char* what) const {
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, bytes, &end) || end > options.weight_arena_bytes) {
      return InvalidArgument(std::string(what) + ": bytes [" + std::to_string(offset) + ", +" +
                             std::to_string(bytes) + ") leave the " +
                             std::to_string(options.weight_arena_bytes) + "-byte weight arena");
    }
    return OkStatus();
  }

  // Frees what a model holds on the device (its executables and weight extents): after a
  // failed Load, so a retry does not leak.
  void Release(Model& m) {
    for (Executable& e : m.executables) {
      if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
      if (e.graph != nullptr) cudaGraphDestroy(e.graph);
      if (e.buffer != nullptr) cudaFree(e.buffer);
    }
    m.executables.clear();
    for (const auto& [name, w] : m.weights) {
      arena->Free(w.offset);
    }
    m.weights.clear();
  }

  Status Check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) {
      return OkStatus();
    }
    // A context is lost only if the device itself now fails to synchronise; an error code
    // alone (cudaErrorUnknown from a host call, say) does not condemn the worker.
    if (IsSticky(e) && cudaDeviceSynchronize() != cudaSuccess) {
      healthy = false;
    }
    return Internal(std::string("CUDA: ") + what + ": " + cudaGetErrorName(e) + ": " +
                    cudaGetErrorString(e) + (healthy ? "" : " (context lost: worker unhealthy)"));
  }
  Status Check(cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) {
      return OkStatus();
    }
    return Internal(std::string("cuBLAS: ") + what + ": " + CublasName(s));
  }

  Status Upload(uint64_t offset, std::span<const uint8_t> bytes) {
    FERRY_RETURN_IF_ERROR(CheckArenaRange(offset, bytes.size(), "upload"));
    auto start = std::chrono::steady_clock::now();
    for (size_t done = 0; done < bytes.size();) {
      size_t chunk = std::min<size_t>(options.staging_bytes, bytes.size() - done);
      std::memcpy(staging, bytes.data() + done, chunk);
      FERRY_RETURN_IF_ERROR(Check(cudaMemcpyAsync(arena_base + offset + done, staging, chunk,
                                                  cudaMemcpyHostToDevice, stream),
                                  "weight upload"));
      FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "weight upload"));
      done += chunk;
    }
    upload_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    uploaded_bytes += bytes.size();
    return OkStatus();
  }

  const float* WeightPtr(const Model& m, const std::string& name) const {
    if (name.empty()) {
      return nullptr;
    }
    return reinterpret_cast<const float*>(arena_base + m.weights.at(name).offset);
  }

  Status UploadWeights(Model& m) {
    const Bundle& bundle = *m.bundle;
    bool bf16 = bundle.manifest.precision == Precision::kBf16;
    std::map<std::string, bool> gemm_weight;
    for (const Op& op : bundle.manifest.program) {
      if (op.kind == OpKind::kDense) {
        gemm_weight[op.weight] = true;
      }
    }
    for (const TensorInfo& t : bundle.weights.index().tensors) {
      FERRY_ASSIGN_OR_RETURN(std::vector<float> values, ToFloat32(t.dtype, bundle.weights.Data(t)));
      DeviceWeight w;
      w.shape = t.shape;
      w.bf16 = bf16 && gemm_weight.count(t.name) > 0;
      std::vector<uint8_t> bytes;
      if (w.bf16) {
        bytes.resize(values.size() * 2);
        for (size_t i = 0; i < values.size(); ++i) {
          uint16_t b = FloatToBf16(values[i]);
          std::memcpy(bytes.data() + 2 * i, &b, 2);
        }
      } else {
        bytes.resize(values.size() * 4);
        std::memcpy(bytes.data(), values.data(), bytes.size());
      }
      std::optional<uint64_t> offset = arena->Allocate(std::max<uint64_t>(bytes.size(), 1));
      if (!offset) {
        return ResourceExhausted("model '" + bundle.manifest.name + "': weight '" + t.name +
                                 "' does not fit the device weight arena");
      }
      w.offset = *offset;
      m.weights[t.name] = w;  // Recorded first, so Release frees it if the upload fails.
      if (!bytes.empty()) {
        FERRY_RETURN_IF_ERROR(Upload(*offset, bytes));
      }
    }
    return OkStatus();
  }

  Status BuildExecutable(const Model& m, const ShapeVariant& variant, int64_t size,
                         Executable* exe) {
    const Manifest& manifest = m.bundle->manifest;
    WeightLookup lookup = [&](const std::string& name) -> std::optional<WeightSpec> {
      const TensorInfo* info = m.bundle->weights.index().Find(name);
      return info ? std::optional<WeightSpec>(WeightSpec{info->dtype, info->shape}) : std::nullopt;
    };
    FERRY_ASSIGN_OR_RETURN(auto shapes, InferShapes(manifest, variant, size, lookup));
    for (const Op& op : manifest.program) {  // The add kernel takes two equal shapes only.
      if (op.kind == OpKind::kAdd && shapes.at(op.inputs[0]) != shapes.at(op.inputs[1])) {
        return InvalidArgument("model '" + manifest.name +
                               "': the CUDA backend does not broadcast add yet (CPU workers do)");
      }
    }
    FERRY_ASSIGN_OR_RETURN(exe->staging, PlanStaging(manifest, shapes));
    // One buffer: every tensor, then the bf16 scratch (as large as the largest dense input).
    uint64_t total = 0, scratch = 0;
    std::map<std::string, uint64_t> offsets;
    for (const auto& [name, shape] : shapes) {
      offsets[name] = total;
      total += AlignUp(static_cast<uint64_t>(*NumElements(shape)) * 4, kDeviceAlignment);
    }
    for (const Op& op : manifest.program) {
      if (op.kind == OpKind::kDense) {
        scratch = std::max<uint64_t>(
            scratch, static_cast<uint64_t>(*NumElements(shapes.at(op.inputs[0]))) * 2);
      }
    }
    FERRY_RETURN_IF_ERROR(Check(
        cudaMalloc(&exe->buffer, total + AlignUp(scratch, kDeviceAlignment) + kDeviceAlignment),
        "executable buffers"));
    FERRY_RETURN_IF_ERROR(
        Check(cudaMemsetAsync(exe->buffer, 0, total, stream), "executable buffers"));
    FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "executable buffers"));
    auto* base = static_cast<uint8_t*>(exe->buffer);
    for (const auto& [name, shape] : shapes) {
      exe->tensors[name] = {reinterpret_cast<float*>(base + offsets[name]), shape};
    }
    exe->bf16_scratch = reinterpret_cast<uint16_t*>(base + total);
    BuildSteps(m, exe);
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

  static uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

  // Translates the program into launch steps, fusing dense + bias + a following activation.
  void BuildSteps(const Model& m, Executable* exe) {
    const Manifest& manifest = m.bundle->manifest;
    const auto& program = manifest.program;
    std::map<std::string, int> readers;
    for (const Op& op : program) {
      for (const std::string& in : op.inputs) {
        ++readers[in];
      }
    }
    auto is_output = [&](const std::string& name) {
      for (const TensorSpec& t : manifest.outputs) {
        if (t.name == name) {
          return true;
        }
      }
      return false;
    };
    for (size_t i = 0; i < program.size(); ++i) {
      const Op& op = program[i];
      DeviceTensor x = exe->tensors.at(op.inputs[0]);
      DeviceTensor y = exe->tensors.at(op.output);
      int64_t count = *NumElements(y.shape);
      switch (op.kind) {
        case OpKind::kDense: {
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
              FERRY_RETURN_IF_ERROR(
                  Check(cuda::FloatToBf16(x.data, scratch, rows * k, s), "to bf16"));
              FERRY_RETURN_IF_ERROR(
                  Check(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                                     static_cast<int>(rows), static_cast<int>(k), &alpha, weight,
                                     CUDA_R_16BF, static_cast<int>(k), scratch, CUDA_R_16BF,
                                     static_cast<int>(k), &beta, y.data, CUDA_R_32F,
                                     static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "bf16 GEMM"));
            } else {
              cublasComputeType_t compute =
                  precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
              FERRY_RETURN_IF_ERROR(
                  Check(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                                     static_cast<int>(rows), static_cast<int>(k), &alpha, weight,
                                     CUDA_R_32F, static_cast<int>(k), x.data, CUDA_R_32F,
                                     static_cast<int>(k), &beta, y.data, CUDA_R_32F,
                                     static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT),
                        "GEMM"));
            }
            if (bias != nullptr || act != cuda::Activation::kNone) {
              return Check(cuda::BiasActivation(y.data, bias, rows, n, act, s), "bias/activation");
            }
            return OkStatus();
          });
          break;
        }
        case OpKind::kRelu:
        case OpKind::kGelu:
        case OpKind::kTanh:
        case OpKind::kSigmoid: {
          cuda::Activation act = op.kind == OpKind::kRelu   ? cuda::Activation::kRelu
                                 : op.kind == OpKind::kGelu ? cuda::Activation::kGelu
                                 : op.kind == OpKind::kTanh ? cuda::Activation::kTanh
                                                            : cuda::Activation::kSigmoid;
          exe->steps.push_back([=, this](cudaStream_t s) {
            return Check(cuda::Elementwise(x.data, y.data, count, act, s), "activation");
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
        case OpKind::kAdd: {
          DeviceTensor b = exe->tensors.at(op.inputs[1]);
          exe->steps.push_back([=, this](cudaStream_t s) {
            return Check(cuda::Add(x.data, b.data, y.data, count, s), "add");
          });
          break;
        }
        case OpKind::kSoftmax: {
          int64_t rank = static_cast<int64_t>(x.shape.size());
          int64_t axis = op.axis < 0 ? op.axis + rank : op.axis;
          int64_t outer = 1, inner = 1;
          for (int64_t d = 0; d < axis; ++d) outer *= x.shape[static_cast<size_t>(d)];
          for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape[static_cast<size_t>(d)];
          int64_t n = x.shape[static_cast<size_t>(axis)];
          exe->steps.push_back([=, this](cudaStream_t s) {
            return Check(cuda::Softmax(x.data, y.data, outer, n, inner, s), "softmax");
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
        case OpKind::kConv2d:
        case OpKind::kMaxPool2d: {
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
          break;
        }
        case OpKind::kGlobalAvgPool: {
          int64_t planes = x.shape[0] * x.shape[1], area = x.shape[2] * x.shape[3];
          exe->steps.push_back([=, this](cudaStream_t s) {
            return Check(cuda::GlobalAvgPool(x.data, y.data, planes, area, s), "global_avgpool");
          });
          break;
        }
        case OpKind::kGather:
        case OpKind::kReduceMean:
        case OpKind::kSub:
        case OpKind::kMul:
        case OpKind::kDiv:
        case OpKind::kTranspose:
        case OpKind::kMatMul:
        case OpKind::kSlice:
        case OpKind::kSqrt:
        case OpKind::kExp:
        case OpKind::kLog:
          break;  // CudaRuns refuses these at load, before any step is built.
        case OpKind::kFlatten:
        case OpKind::kReshape:
          exe->steps.push_back([=, this](cudaStream_t s) {
            return Check(cudaMemcpyAsync(y.data, x.data, static_cast<size_t>(count) * 4,
                                         cudaMemcpyDeviceToDevice, s),
                         "reshape copy");
          });
          break;
      }
    }
  }

  // Moves tensor `index` (an input when to_device, else an output) between every request's
  // block and the device batch `t`, along the tensor's batch axis; pads inputs with zero
  // rows up to the compiled size. A tensor without a batch axis is the first request's.
  Status CopyRows(const BatchJob& job, const Manifest& manifest, const TensorSpec& spec,
                  const DeviceTensor& t, size_t index, bool to_device) {
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
  Status Dispatch(const Executable& exe, const Manifest& manifest, const BatchJob& job) {
    const StagingLayout& layout = exe.staging;
    if (layout.total_bytes <= options.staging_bytes) {
      std::span<uint8_t> buffer(staging, options.staging_bytes);
      for (size_t i = 0; i < manifest.inputs.size(); ++i) {
        GatherInput(layout, job, i, buffer);
        const StagingLayout::Tensor& t = layout.inputs[i];
        FERRY_RETURN_IF_ERROR(
            Check(cudaMemcpyAsync(exe.tensors.at(manifest.inputs[i].name).data, staging + t.offset,
                                  t.bytes, cudaMemcpyHostToDevice, stream),
                  "input copy"));
      }
      FERRY_RETURN_IF_ERROR(Launch(exe, options.use_graphs));
      for (size_t o = 0; o < manifest.outputs.size(); ++o) {
        const StagingLayout::Tensor& t = layout.outputs[o];
        FERRY_RETURN_IF_ERROR(
            Check(cudaMemcpyAsync(staging + t.offset, exe.tensors.at(manifest.outputs[o].name).data,
                                  t.bytes, cudaMemcpyDeviceToHost, stream),
                  "output copy"));
      }
      FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "dispatch"));
      for (size_t o = 0; o < manifest.outputs.size(); ++o) {
        ScatterOutput(layout, job, o, buffer);
      }
      return OkStatus();
    }
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

  Status RunSteps(const Executable& exe) {
    for (const Step& step : exe.steps) {
      FERRY_RETURN_IF_ERROR(step(stream));
    }
    return OkStatus();
  }

  // Captures the steps as a graph; false on failure, when the partial graph is dropped, the
  // error cleared, and exe->exec stays null (plain launches).
  bool Capture(Executable* exe) {
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

  Status Launch(const Executable& exe, bool graph) {
    if (graph && exe.exec != nullptr) {
      return Check(cudaGraphLaunch(exe.exec, stream), "graph launch");
    }
    return RunSteps(exe);
  }
};

Result<int> CudaDeviceCount() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorNoDevice) {
    cudaGetLastError();
    return 0;
  }
  if (e == cudaErrorInsufficientDriver) {
    // The runtime says this both when the driver is too old and when there is no driver at
    // all. Only a driver that is there (libcuda loads) but too old is an error; no driver
    // means no GPU on this machine.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) {
      cudaGetLastError();
      return 0;
    }
    dlclose(driver);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Unavailable(std::string("CUDA: cannot count devices: ") + cudaGetErrorName(e) + ": " +
                       cudaGetErrorString(e));
  }
  return count;
}

bool CudaDeviceAvailable() {
  Result<int> count = CudaDeviceCount();
  return count.ok() && *count > 0;
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaBackend::~CudaBackend() {
  StopExecution();  // Batches queued on the execution thread finish before anything goes.
  Impl& d = *impl_;
  for (Model& m : d.models) {
    for (Executable& e : m.executables) {
      if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
      if (e.graph != nullptr) cudaGraphDestroy(e.graph);
      if (e.buffer != nullptr) cudaFree(e.buffer);
    }
  }
  if (d.cublas != nullptr) cublasDestroy(d.cublas);
  if (d.cublas_workspace != nullptr) cudaFree(d.cublas_workspace);
  if (d.arena_base != nullptr) cudaFree(d.arena_base);
  if (d.staging != nullptr) cudaFreeHost(d.staging);
  if (d.stream != nullptr) cudaStreamDestroy(d.stream);
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  FERRY_ASSIGN_OR_RETURN(int devices, CudaDeviceCount());
  if (devices == 0) {
    return Unavailable(
        "cuda backend: no CUDA device (the NVIDIA driver, libcuda.so.1, is absent or sees no GPU)");
  }
  if (options.device < 0 || options.device >= devices) {
    return Unavailable("cuda backend: no CUDA device " + std::to_string(options.device) + " (" +
                       std::to_string(devices) + " found)");
  }
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.options = options;
  std::unique_ptr<CudaBackend> backend(new CudaBackend(std::move(impl)));
  FERRY_RETURN_IF_ERROR(d.Check(cudaSetDevice(options.device), "select device"));
  FERRY_RETURN_IF_ERROR(
      d.Check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "create stream"));
  FERRY_RETURN_IF_ERROR(
      d.Check(cudaMalloc(reinterpret_cast<void**>(&d.arena_base), options.weight_arena_bytes),
              "allocate the weight arena"));
  d.arena = std::make_unique<DeviceWeightArena>(d.arena_base, options.weight_arena_bytes);
  FERRY_RETURN_IF_ERROR(d.Check(cudaHostAlloc(reinterpret_cast<void**>(&d.staging),
                                              options.staging_bytes, cudaHostAllocDefault),
                                "allocate pinned staging"));
  FERRY_RETURN_IF_ERROR(d.Check(cublasCreate(&d.cublas), "create cuBLAS handle"));
  FERRY_RETURN_IF_ERROR(d.Check(cublasSetStream(d.cublas, d.stream), "cuBLAS stream"));
  // A fixed workspace keeps cuBLAS from allocating during graph capture.
  FERRY_RETURN_IF_ERROR(
      d.Check(cudaMalloc(&d.cublas_workspace, kCublasWorkspace), "cuBLAS workspace"));
  FERRY_RETURN_IF_ERROR(d.Check(cublasSetWorkspace(d.cublas, d.cublas_workspace, kCublasWorkspace),
                                "cuBLAS workspace"));
  return backend;
}

namespace {

// What this backend does not run yet: inputs other than FP32 (the CPU backend converts them)
// and the gather and reduce_mean ops. Refused at load with the reason, so a node file that
// puts such a model on a GPU says so instead of failing at its first request.
Status CudaRuns(const Manifest& manifest) {
  for (const TensorSpec& input : manifest.inputs) {
    if (input.dtype != DType::kF32) {
      return InvalidArgument("model '" + manifest.name + "': input '" + input.name + "' is " +
                             std::string(KServeName(input.dtype)) +
                             "; the CUDA backend takes FP32 inputs only (CPU workers convert)");
    }
  }
  for (const Op& op : manifest.program) {
    bool broadcast = op.kind == OpKind::kAdd && op.inputs.size() != 2;  // A weight operand.
    if (op.kind == OpKind::kGather || op.kind == OpKind::kReduceMean || op.kind == OpKind::kSub ||
        op.kind == OpKind::kMul || op.kind == OpKind::kDiv || op.kind == OpKind::kTranspose ||
        op.kind == OpKind::kMatMul || op.kind == OpKind::kSlice || op.kind == OpKind::kSqrt ||
        op.kind == OpKind::kExp || op.kind == OpKind::kLog || broadcast) {
      return InvalidArgument("model '" + manifest.name + "': the CUDA backend does not run " +
                             std::string(OpKindName(op.kind)) + " yet (CPU workers do)");
    }
  }
  return OkStatus();
}

}  // namespace

Result<ModelHandle> CudaBackend::Load(const Bundle& bundle) {
  Impl& d = *impl_;
  ModelHandle handle = static_cast<ModelHandle>(d.models.size());
  d.models.emplace_back();
  Model& m = d.models.back();
  m.bundle = &bundle;
  Status built = CudaRuns(bundle.manifest);
  if (built.ok()) {
    built = d.Select();
  }
  if (built.ok()) {
    built = d.UploadWeights(m);
  }
  for (size_t v = 0; built.ok() && v < bundle.manifest.variants.size(); ++v) {
    for (int64_t size : bundle.manifest.batch_sizes) {
      m.executables.emplace_back();
      built = d.BuildExecutable(m, bundle.manifest.variants[v], size, &m.executables.back());
      if (!built.ok()) {
        break;
      }
    }
  }
  if (!built.ok()) {
    (void)cudaStreamSynchronize(d.stream);  // Nothing in flight may touch what is freed.
    d.Release(m);
    m.failure = built.error();
    return built.error();
  }
  return handle;
}

void CudaBackend::Unload(ModelHandle model) {
  if (model < 0 || static_cast<size_t>(model) >= impl_->models.size()) {
    return;
  }
  Model& m = impl_->models[static_cast<size_t>(model)];
  if (impl_->Select().ok()) {  // Device memory is freed on the backend's device.
    impl_->Release(m);
  }
  m.failure = NotFound("the model was unloaded");
}

Status CudaBackend::ModelStatus(ModelHandle model) const {
  if (model < 0 || static_cast<size_t>(model) >= impl_->models.size()) {
    return NotFound("cuda backend: no model " + std::to_string(model));
  }
  const Model& m = impl_->models[static_cast<size_t>(model)];
  if (m.failure) {
    return *m.failure;
  }
  if (!impl_->healthy) {
    return Unavailable("cuda backend: the CUDA context is lost; the worker must restart");
  }
  return OkStatus();
}

Result<ExecutionTiming> CudaBackend::Execute(ModelHandle handle, const BatchJob& job) {
  FERRY_RETURN_IF_ERROR(ModelStatus(handle));
  Impl& d = *impl_;
  Model& m = d.models[static_cast<size_t>(handle)];
  const Manifest& manifest = m.bundle->manifest;
  FERRY_RETURN_IF_ERROR(ValidateJob(manifest, job));
  FERRY_RETURN_IF_ERROR(d.Select());
  auto start = std::chrono::steady_clock::now();
  size_t size_index = static_cast<size_t>(
      std::find(manifest.batch_sizes.begin(), manifest.batch_sizes.end(), job.batch_size) -
      manifest.batch_sizes.begin());
  Executable& exe =
      m.executables[static_cast<size_t>(job.variant) * manifest.batch_sizes.size() + size_index];
  Status ran = d.Dispatch(exe, manifest, job);
  if (!ran.ok()) {
    // Copies from or to the requests' blocks may still be queued: they must finish before
    // the caller may reuse or release those blocks (backend.h's span contract).
    (void)cudaStreamSynchronize(d.stream);
    return ran.error();
  }
  return ExecutionTiming{
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.0};
}

Status CudaBackend::RegisterHostMemory(std::span<uint8_t> memory, bool read_only) {
  FERRY_RETURN_IF_ERROR(impl_->Select());
  // Never a reason to mark the backend unhealthy: report the error and carry on pageable.
  // A read-only mapping can only be registered read-only (the driver would otherwise try to
  // pin it writable and fail).
  cudaError_t e = cudaHostRegister(memory.data(), memory.size(),
                                   read_only ? cudaHostRegisterReadOnly : cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    ++impl_->host_register_failures;
    spdlog::warn(
        "CUDA: registering {} bytes of {} host memory failed ({}); copies from it run "
        "from pageable memory",
        memory.size(), read_only ? "read-only" : "writable", cudaGetErrorString(e));
    return Internal(std::string("CUDA: register host memory: ") + cudaGetErrorString(e));
  }
  return OkStatus();
}

Status CudaBackend::UnregisterHostMemory(std::span<uint8_t> memory) {
  FERRY_RETURN_IF_ERROR(impl_->Select());
  cudaError_t e = cudaHostUnregister(memory.data());
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Internal(std::string("CUDA: unregister host memory: ") + cudaGetErrorString(e));
  }
  return OkStatus();
}

bool CudaBackend::healthy() const { return impl_->healthy.load(); }
uint64_t CudaBackend::host_register_failures() const { return impl_->host_register_failures; }
uint64_t CudaBackend::graph_fallbacks() const { return impl_->graph_fallbacks; }

WeightArena* CudaBackend::weight_arena() { return impl_->arena.get(); }

Status CudaBackend::Upload(uint64_t offset, std::span<const uint8_t> bytes) {
  FERRY_RETURN_IF_ERROR(impl_->Select());
  return impl_->Upload(offset, bytes);
}

Status CudaBackend::Download(uint64_t offset, std::span<uint8_t> bytes) {
  Impl& d = *impl_;
  FERRY_RETURN_IF_ERROR(d.CheckArenaRange(offset, bytes.size(), "download"));
  FERRY_RETURN_IF_ERROR(d.Select());
  FERRY_RETURN_IF_ERROR(d.Check(cudaMemcpyAsync(bytes.data(), d.arena_base + offset, bytes.size(),
                                                cudaMemcpyDeviceToHost, d.stream),
                                "download"));
  return d.Check(cudaStreamSynchronize(d.stream), "download");
}

Result<double> CudaBackend::TimeProgram(ModelHandle handle, int variant, int64_t batch_size,
                                        int iterations, bool graph) {
  FERRY_RETURN_IF_ERROR(ModelStatus(handle));
  Impl& d = *impl_;
  Model& m = d.models[static_cast<size_t>(handle)];
  const Manifest& manifest = m.bundle->manifest;
  auto it = std::find(manifest.batch_sizes.begin(), manifest.batch_sizes.end(), batch_size);
  if (it == manifest.batch_sizes.end() || variant < 0 ||
      static_cast<size_t>(variant) >= manifest.variants.size()) {
    return InvalidArgument("no executable for that variant and size");
  }
  Executable& exe = m.executables[static_cast<size_t>(variant) * manifest.batch_sizes.size() +
                                  static_cast<size_t>(it - manifest.batch_sizes.begin())];
  if (graph && exe.exec == nullptr) {
    return Unavailable("model '" + manifest.name + "', batch " + std::to_string(batch_size) +
                       ": no CUDA graph (capture failed); only plain launches can be timed");
  }
  FERRY_RETURN_IF_ERROR(d.Select());
  cudaEvent_t begin = nullptr, end = nullptr;
  struct Events {
    cudaEvent_t* a;
    cudaEvent_t* b;
    ~Events() {
      if (*a != nullptr) cudaEventDestroy(*a);
      if (*b != nullptr) cudaEventDestroy(*b);
    }
  } guard{&begin, &end};
  FERRY_RETURN_IF_ERROR(d.Check(cudaEventCreate(&begin), "event"));
  FERRY_RETURN_IF_ERROR(d.Check(cudaEventCreate(&end), "event"));
  for (int i = 0; i < 3; ++i) {
    FERRY_RETURN_IF_ERROR(d.Launch(exe, graph));  // Warm up.
  }
  FERRY_RETURN_IF_ERROR(d.Check(cudaEventRecord(begin, d.stream), "event"));
  for (int i = 0; i < iterations; ++i) {
    FERRY_RETURN_IF_ERROR(d.Launch(exe, graph));
  }
  FERRY_RETURN_IF_ERROR(d.Check(cudaEventRecord(end, d.stream), "event"));
  FERRY_RETURN_IF_ERROR(d.Check(cudaEventSynchronize(end), "event"));
  float ms = 0;
  FERRY_RETURN_IF_ERROR(d.Check(cudaEventElapsedTime(&ms, begin, end), "event"));
  return static_cast<double>(ms) / 1e3 / iterations;
}

double CudaBackend::upload_seconds() const { return impl_->upload_seconds; }
uint64_t CudaBackend::uploaded_bytes() const { return impl_->uploaded_bytes; }

}  // namespace ferry
