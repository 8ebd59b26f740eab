// The CUDA backend's use of cuDNN, behind an opaque context so that the backend builds where
// cuDNN's headers are absent (cudnn_absent.cc) and serves where its library is (cudnn_conv.h):
// convolutions then run on cuDNN, else on ferry's direct kernel (kernels.h: Conv2d).
//
// Thread safety: StartCudnn from any thread; a context and its steps on the backend's
// execution thread only (one stream).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "common/result.h"
#include "worker/backends/cuda/kernels.h"

namespace ferry::cuda {

class CudnnContext;  // A cuDNN handle on the backend's stream and its shared workspace.

// The most workspace one convolution's algorithm may use (shared: one stream runs them in turn).
inline constexpr size_t kCudnnWorkspace = 64 << 20;

// A context when `wanted` and libcudnn.so.9 loads and starts; else null, the reason logged.
// REQUIRES: `stream` outlives the context.
std::shared_ptr<CudnnContext> StartCudnn(cudaStream_t stream, bool wanted);

// A launch step for y = conv2d(x, weight) + bias (bias may be null), NCHW FP32, on cuDNN with
// the algorithm its heuristics pick at this shape (TF32 tensor cores only if `allow_tf32`).
// UNAVAILABLE with cuDNN's reason when it has none: the caller runs the direct kernel. The
// step keeps the context alive.
Result<std::function<Status(cudaStream_t)>> CudnnConvStep(std::shared_ptr<CudnnContext> context,
                                                          const ConvShape& shape, bool allow_tf32,
                                                          const float* x, const float* weight,
                                                          const float* bias, float* y);

}  // namespace ferry::cuda
