// Convolutions on cuDNN 9, loaded at run time: the worker dlopens libcudnn.so.9 the first time
// a GPU backend is made, so a GPU host without cuDNN still serves its convolutions on ferry's
// direct kernel (kernels.h: Conv2d), and the .deb does not pull cuDNN in. Each conv2d of an
// executable gets its descriptors and algorithm once, at load (cuDNN's heuristics, with the
// workspace it may use capped); a configuration cuDNN refuses falls back to the direct kernel.
//
// Thread safety: CudnnLibrary::Get is safe from any thread; a CudnnConv is used by the
// backend's execution thread only (one stream).
#pragma once

#include <cudnn.h>

#include <memory>

#include "common/result.h"
#include "worker/backends/cuda/kernels.h"

namespace ferry::cuda {

// The cuDNN entry points ferry calls, resolved with dlsym.
struct CudnnLibrary {
  // Loaded once per process; nullptr when libcudnn.so.9 (or one of its symbols) is absent.
  static const CudnnLibrary* Get();

#define FERRY_CUDNN_FN(name) decltype(&::name) name = nullptr
  FERRY_CUDNN_FN(cudnnCreate);
  FERRY_CUDNN_FN(cudnnDestroy);
  FERRY_CUDNN_FN(cudnnSetStream);
  FERRY_CUDNN_FN(cudnnGetErrorString);
  FERRY_CUDNN_FN(cudnnCreateTensorDescriptor);
  FERRY_CUDNN_FN(cudnnSetTensor4dDescriptor);
  FERRY_CUDNN_FN(cudnnDestroyTensorDescriptor);
  FERRY_CUDNN_FN(cudnnCreateFilterDescriptor);
  FERRY_CUDNN_FN(cudnnSetFilter4dDescriptor);
  FERRY_CUDNN_FN(cudnnDestroyFilterDescriptor);
  FERRY_CUDNN_FN(cudnnCreateConvolutionDescriptor);
  FERRY_CUDNN_FN(cudnnSetConvolution2dDescriptor);
  FERRY_CUDNN_FN(cudnnSetConvolutionGroupCount);
  FERRY_CUDNN_FN(cudnnSetConvolutionMathType);
  FERRY_CUDNN_FN(cudnnDestroyConvolutionDescriptor);
  FERRY_CUDNN_FN(cudnnGetConvolutionForwardAlgorithmMaxCount);
  FERRY_CUDNN_FN(cudnnGetConvolutionForwardAlgorithm_v7);
  FERRY_CUDNN_FN(cudnnConvolutionForward);
#undef FERRY_CUDNN_FN
};

// One conv2d at one shape: y = conv(x, weight) (+ bias per output channel), NCHW, FP32.
class CudnnConv {
 public:
  // REQUIRES: `handle` was made by `lib` and lives longer than the CudnnConv. `allow_tf32`:
  // the manifest's precision permits TF32 tensor cores (else FP32 FMA only).
  // `workspace_bytes`: the most workspace an algorithm may use. UNAVAILABLE with cuDNN's
  // reason when it has no algorithm for the shape.
  static Result<std::unique_ptr<CudnnConv>> Create(const CudnnLibrary& lib, cudnnHandle_t handle,
                                                   const ConvShape& shape, bool allow_tf32,
                                                   size_t workspace_bytes);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // Enqueues the convolution and the bias (may be null) on the handle's stream; INTERNAL
  // naming cuDNN's or CUDA's error. REQUIRES: `workspace` holds the workspace_bytes given to
  // Create.
  Status Run(const float* x, const float* weight, const float* bias, float* y, void* workspace,
             cudaStream_t stream) const;

 private:
  CudnnConv(const CudnnLibrary& lib, cudnnHandle_t handle, const ConvShape& shape)
      : lib_(lib), handle_(handle), shape_(shape) {}

  const CudnnLibrary& lib_;
  cudnnHandle_t handle_;
  ConvShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
};

}  // namespace ferry::cuda
