#include "worker/backends/cuda/cudnn_context.h"

#include <spdlog/spdlog.h>

#include <string>

#include "worker/backends/cuda/cudnn_conv.h"

namespace ferry::cuda {

class CudnnContext {
 public:
  CudnnContext(const CudnnLibrary& lib, cudnnHandle_t handle, void* workspace)
      : lib(lib), handle(handle), workspace(workspace) {}
  ~CudnnContext() {
    lib.cudnnDestroy(handle);
    cudaFree(workspace);
  }
  CudnnContext(const CudnnContext&) = delete;
  CudnnContext& operator=(const CudnnContext&) = delete;

  const CudnnLibrary& lib;
  cudnnHandle_t handle;
  void* workspace;
};

std::shared_ptr<CudnnContext> StartCudnn(cudaStream_t stream, bool wanted) {
  const CudnnLibrary* lib = wanted ? CudnnLibrary::Get() : nullptr;
  if (lib == nullptr) {
    spdlog::info("CUDA: convolutions on ferry's direct kernel ({})",
                 wanted ? "libcudnn.so.9 not found" : "cuDNN off");
    return nullptr;
  }
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t made = lib->cudnnCreate(&handle);
  if (made != CUDNN_STATUS_SUCCESS) {
    spdlog::warn("CUDA: cuDNN did not start ({}); convolutions on ferry's direct kernel",
                 lib->cudnnGetErrorString(made));
    return nullptr;
  }
  void* workspace = nullptr;
  cudnnStatus_t bound = lib->cudnnSetStream(handle, stream);
  if (bound != CUDNN_STATUS_SUCCESS || cudaMalloc(&workspace, kCudnnWorkspace) != cudaSuccess) {
    cudaGetLastError();
    spdlog::warn("CUDA: cuDNN's stream or workspace failed; convolutions on the direct kernel");
    lib->cudnnDestroy(handle);
    return nullptr;
  }
  spdlog::info("CUDA: convolutions on cuDNN");
  return std::make_shared<CudnnContext>(*lib, handle, workspace);
}

Result<std::function<Status(cudaStream_t)>> CudnnConvStep(std::shared_ptr<CudnnContext> context,
                                                          const ConvShape& shape, bool allow_tf32,
                                                          const float* x, const float* weight,
                                                          const float* bias, float* y) {
  FERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<CudnnConv> made,
      CudnnConv::Create(context->lib, context->handle, shape, allow_tf32, kCudnnWorkspace));
  std::shared_ptr<const CudnnConv> conv = std::move(made);
  std::function<Status(cudaStream_t)> step = [context, conv, x, weight, bias,
                                              y](cudaStream_t stream) {
    return conv->Run(x, weight, bias, y, context->workspace, stream);
  };
  return step;
}

}  // namespace ferry::cuda
