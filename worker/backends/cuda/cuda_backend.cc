#include "worker/backends/cuda/cuda_backend.h"

#include <algorithm>

#include "worker/backends/cuda/cuda_backend_impl.h"
#include "worker/backends/cuda/device_plans.h"

namespace ferry {
namespace {

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

}  // namespace

// [offset, offset + bytes) inside the weight arena, overflow-checked.
Status CudaBackend::Impl::CheckArenaRange(uint64_t offset, uint64_t bytes, const char* what) const {
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > options.weight_arena_bytes) {
    return InvalidArgument(std::string(what) + ": bytes [" + std::to_string(offset) + ", +" +
                           std::to_string(bytes) + ") leave the " +
                           std::to_string(options.weight_arena_bytes) + "-byte weight arena");
  }
  return OkStatus();
}

namespace {

void FreeExecutable(Executable& e) {
  if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  if (e.graph != nullptr) cudaGraphDestroy(e.graph);
  if (e.buffer != nullptr) cudaFree(e.buffer);
}

}  // namespace

void CudaBackend::Impl::FreeWeights(Model& m) {
  for (const auto& [name, w] : m.weights) {
    arena->Free(w.offset);
  }
  m.weights.clear();
}

void CudaBackend::Impl::Release(Model& m) {
  for (Executable& e : m.executables) {
    FreeExecutable(e);
  }
  m.executables.clear();
  FreeWeights(m);
}

void CudaBackend::Impl::Retire(Model& m) {
  {
    std::lock_guard lock(retired_mu);
    for (Executable& e : m.executables) {
      retired.push_back(std::move(e));
    }
  }
  m.executables.clear();
  FreeWeights(m);
}

void CudaBackend::Impl::FreeRetired() {
  std::vector<Executable> done;
  {
    std::lock_guard lock(retired_mu);
    done.swap(retired);
  }
  for (Executable& e : done) {
    FreeExecutable(e);
  }
}

Status CudaBackend::Impl::Check(cudaError_t e, const char* what) {
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

Status CudaBackend::Impl::Check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) {
    return OkStatus();
  }
  return Internal(std::string("cuBLAS: ") + what + ": " + CublasName(s));
}

Status CudaBackend::Impl::Upload(uint64_t offset, std::span<const uint8_t> bytes) {
  return UploadVia(offset, bytes, stream, staging, options.staging_bytes, true);
}

Status CudaBackend::Impl::UploadVia(uint64_t offset, std::span<const uint8_t> bytes, cudaStream_t s,
                                    uint8_t* pinned, size_t pinned_bytes, bool count) {
  FERRY_RETURN_IF_ERROR(CheckArenaRange(offset, bytes.size(), "upload"));
  auto start = std::chrono::steady_clock::now();
  for (size_t done = 0; done < bytes.size();) {
    size_t chunk = std::min<size_t>(pinned_bytes, bytes.size() - done);
    std::memcpy(pinned, bytes.data() + done, chunk);
    FERRY_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(arena_base + offset + done, pinned, chunk, cudaMemcpyHostToDevice, s),
              "weight upload"));
    FERRY_RETURN_IF_ERROR(Check(cudaStreamSynchronize(s), "weight upload"));
    done += chunk;
  }
  if (count) {
    upload_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    uploaded_bytes += bytes.size();
  }
  return OkStatus();
}

const float* CudaBackend::Impl::WeightPtr(const Model& m, const std::string& name) const {
  if (name.empty()) {
    return nullptr;
  }
  return reinterpret_cast<const float*>(arena_base + m.weights.at(name).offset);
}

Status CudaBackend::Impl::UploadWeights(Model& m, bool loader) {
  const Bundle& bundle = *m.bundle;
  bool bf16 = bundle.manifest.precision == Precision::kBf16;
  // BF16 only for weights read by dense ops alone: any other op reads its weight as FP32.
  std::map<std::string, bool> gemm_weight;
  auto use = [&](const std::string& name, bool as_gemm_weight) {
    if (!name.empty()) {
      auto [it, fresh] = gemm_weight.try_emplace(name, as_gemm_weight);
      it->second = it->second && as_gemm_weight;
    }
  };
  for (const Op& op : bundle.manifest.program) {
    use(op.weight, op.kind == OpKind::kDense);
    use(op.bias, false);
  }
  m.resident_bytes = 0;
  for (const TensorInfo& t : bundle.weights.index().tensors) {
    FERRY_ASSIGN_OR_RETURN(std::vector<float> values, ToFloat32(t.dtype, bundle.weights.Data(t)));
    DeviceWeight w;
    w.shape = t.shape;
    auto gemm = gemm_weight.find(t.name);
    w.bf16 = bf16 && gemm != gemm_weight.end() && gemm->second;
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
    m.resident_bytes += AlignUp(std::max<uint64_t>(bytes.size(), 1), kDeviceAlignment);
    if (!bytes.empty()) {
      FERRY_RETURN_IF_ERROR(loader ? UploadVia(*offset, bytes, loader_stream, loader_staging,
                                               kLoaderStagingBytes, false)
                                   : Upload(*offset, bytes));
    }
  }
  return OkStatus();
}

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
    d.Release(m);
  }
  d.FreeRetired();
  d.models.clear();  // Their steps hold the cuDNN context: it goes before the stream.
  d.cudnn.reset();
  if (d.cublas != nullptr) cublasDestroy(d.cublas);
  if (d.cublas_workspace != nullptr) cudaFree(d.cublas_workspace);
  if (d.arena_base != nullptr) cudaFree(d.arena_base);
  if (d.staging != nullptr) cudaFreeHost(d.staging);
  if (d.stream != nullptr) cudaStreamDestroy(d.stream);
  if (d.loader_staging != nullptr) cudaFreeHost(d.loader_staging);
  if (d.loader_stream != nullptr) cudaStreamDestroy(d.loader_stream);
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
  if (d.options.weight_arena_bytes == 0) {
    size_t free = 0, total = 0;
    FERRY_RETURN_IF_ERROR(d.Check(cudaMemGetInfo(&free, &total), "device memory"));
    d.options.weight_arena_bytes = cuda::ArenaBytesFor(free, total);
    spdlog::info("CUDA device {}: {} MiB free of {} MiB; weight arena {} MiB", options.device,
                 free >> 20, total >> 20, d.options.weight_arena_bytes >> 20);
  }
  FERRY_RETURN_IF_ERROR(
      d.Check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "create stream"));
  FERRY_RETURN_IF_ERROR(
      d.Check(cudaMalloc(reinterpret_cast<void**>(&d.arena_base), d.options.weight_arena_bytes),
              "allocate the weight arena"));
  d.arena = std::make_unique<DeviceWeightArena>(d.arena_base, d.options.weight_arena_bytes);
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
  FERRY_RETURN_IF_ERROR(d.StartLoader());  // Here, never beside a capture.
  d.cudnn = cuda::StartCudnn(d.stream, options.use_cudnn);
  return backend;
}

Result<ModelHandle> CudaBackend::Load(const Bundle& bundle) {
  Impl& d = *impl_;
  ModelHandle handle = static_cast<ModelHandle>(d.models.size());
  d.models.emplace_back();
  Model& m = d.models.back();
  m.bundle = &bundle;
  // Every op runs here; a gather's ids are bounded by its input's range (shape inference).
  Status built = d.Select();
  if (built.ok()) {
    built = d.UploadWeights(m);
  }
  if (built.ok()) {
    built = d.BuildExecutables(m);
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
  d.FreeRetired();
  FERRY_RETURN_IF_ERROR(d.Resident(m));
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

uint64_t CudaBackend::cudnn_convolutions() const { return impl_->cudnn_convs; }

uint64_t CudaBackend::cudnn_fallbacks() const { return impl_->cudnn_fallbacks; }

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
  FERRY_RETURN_IF_ERROR(d.Select());
  d.FreeRetired();
  FERRY_RETURN_IF_ERROR(d.Resident(m));
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
