// Built instead of cudnn_context.cc where cuDNN's headers are absent: convolutions run on the
// direct kernel.
#include <spdlog/spdlog.h>

#include "worker/backends/cuda/cudnn_context.h"

namespace ferry::cuda {

class CudnnContext {};

std::shared_ptr<CudnnContext> StartCudnn(cudaStream_t, bool) {
  spdlog::info("CUDA: convolutions on ferry's direct kernel (built without cuDNN)");
  return nullptr;
}

Result<std::function<Status(cudaStream_t)>> CudnnConvStep(std::shared_ptr<CudnnContext>,
                                                          const ConvShape&, bool, const float*,
                                                          const float*, const float*, float*) {
  return Unavailable("built without cuDNN");
}

}  // namespace ferry::cuda
