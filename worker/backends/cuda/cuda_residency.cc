// Residency on the GPU (worker/weight_residency.h): a model's device memory, weights and
// executables both, released and restored while its handle stays valid. A restore runs on the
// worker's loader thread beside batches of other models, so it uploads through a stream and a
// pinned buffer of its own; the executables (buffers, cuBLAS and cuDNN steps, the CUDA graph)
// are built at the model's next batch, on the execution thread that owns the backend's stream
// and library handles. That first batch pays the build (graph capture included).
#include "worker/backends/cuda/cuda_backend_impl.h"

namespace ferry {

Status CudaBackend::Impl::BuildExecutables(Model& m) {
  const Manifest& manifest = m.bundle->manifest;
  m.executables.clear();
  m.executables.reserve(manifest.variants.size() * manifest.batch_sizes.size());
  for (const ShapeVariant& variant : manifest.variants) {
    for (int64_t size : manifest.batch_sizes) {
      m.executables.emplace_back();
      FERRY_RETURN_IF_ERROR(BuildExecutable(m, variant, size, &m.executables.back()));
    }
  }
  return OkStatus();
}

Status CudaBackend::Impl::Resident(Model& m) {
  if (m.released) {  // The loop never plans a batch of a released model: a guard.
    return Unavailable("model '" + m.bundle->manifest.name +
                       "': its weights are released from the GPU (cold; a load is due)");
  }
  if (!m.needs_build) {
    return OkStatus();
  }
  m.needs_build = false;
  Status built = BuildExecutables(m);
  if (!built.ok()) {
    // Failed for good: the model's status says so and the worker fails it (its residency
    // still counts it resident, so no load would come to retry).
    (void)cudaStreamSynchronize(stream);
    Release(m);
    m.failure = built.error();
    return built.error();
  }
  return OkStatus();
}

Status CudaBackend::Impl::StartLoader() {
  if (loader_stream == nullptr) {
    FERRY_RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&loader_stream, cudaStreamNonBlocking), "loader stream"));
  }
  if (loader_staging == nullptr) {
    FERRY_RETURN_IF_ERROR(Check(cudaHostAlloc(reinterpret_cast<void**>(&loader_staging),
                                              kLoaderStagingBytes, cudaHostAllocDefault),
                                "loader staging"));
  }
  return OkStatus();
}

bool CudaBackend::SupportsResidency() const { return true; }

uint64_t CudaBackend::DefaultWeightBudget() const { return impl_->arena->capacity(); }

uint64_t CudaBackend::WeightBytes(ModelHandle handle) const {
  if (handle < 0 || static_cast<size_t>(handle) >= impl_->models.size()) {
    return 0;
  }
  return impl_->models[static_cast<size_t>(handle)].resident_bytes;
}

void CudaBackend::ReleaseWeights(ModelHandle handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= impl_->models.size()) {
    return;
  }
  Impl& d = *impl_;
  Model& m = d.models[static_cast<size_t>(handle)];
  if (m.failure || m.released) {
    return;
  }
  // No batch of this model is in flight (the contract: Execute synchronises before it
  // returns), so its weights may go now; its executables go at the execution thread's next
  // batch.
  d.Retire(m);
  m.released = true;
  m.needs_build = false;
}

Status CudaBackend::RestoreWeights(ModelHandle handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= impl_->models.size()) {
    return NotFound("cuda backend: no model " + std::to_string(handle));
  }
  Impl& d = *impl_;
  Model& m = d.models[static_cast<size_t>(handle)];
  if (m.failure) {
    return *m.failure;
  }
  if (!m.released) {
    return OkStatus();
  }
  FERRY_RETURN_IF_ERROR(d.Select());  // The device is chosen per thread.
  if (Status up = d.UploadWeights(m, true); !up.ok()) {
    d.FreeWeights(m);
    return up.error();  // Still released: a later load may try again.
  }
  m.needs_build = true;
  m.released = false;
  return OkStatus();
}

}  // namespace ferry
