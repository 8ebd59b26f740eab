#include "worker/backends/cuda/cudnn_conv.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

// The legacy convolution API is deprecated in cuDNN 9 (for the graph API) but kept; it is the
// one that maps onto a fixed NCHW conv2d without building an operation graph per shape.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace ferry::cuda {
namespace {

CudnnLibrary* Load() {
  void* so = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (so == nullptr) {
    return nullptr;
  }
  auto* lib = new CudnnLibrary();  // Lives as long as the process, as the library does.
  bool found = true;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(so, name));
    found = found && fn != nullptr;
  };
#define FERRY_BIND(name) bind(lib->name, #name)
  FERRY_BIND(cudnnCreate);
  FERRY_BIND(cudnnDestroy);
  FERRY_BIND(cudnnSetStream);
  FERRY_BIND(cudnnGetErrorString);
  FERRY_BIND(cudnnCreateTensorDescriptor);
  FERRY_BIND(cudnnSetTensor4dDescriptor);
  FERRY_BIND(cudnnDestroyTensorDescriptor);
  FERRY_BIND(cudnnCreateFilterDescriptor);
  FERRY_BIND(cudnnSetFilter4dDescriptor);
  FERRY_BIND(cudnnDestroyFilterDescriptor);
  FERRY_BIND(cudnnCreateConvolutionDescriptor);
  FERRY_BIND(cudnnSetConvolution2dDescriptor);
  FERRY_BIND(cudnnSetConvolutionGroupCount);
  FERRY_BIND(cudnnSetConvolutionMathType);
  FERRY_BIND(cudnnDestroyConvolutionDescriptor);
  FERRY_BIND(cudnnGetConvolutionForwardAlgorithmMaxCount);
  FERRY_BIND(cudnnGetConvolutionForwardAlgorithm_v7);
  FERRY_BIND(cudnnConvolutionForward);
#undef FERRY_BIND
  if (!found) {
    delete lib;
    dlclose(so);
    return nullptr;
  }
  return lib;
}

int I(int64_t v) { return static_cast<int>(v); }

}  // namespace

const CudnnLibrary* CudnnLibrary::Get() {
  static const CudnnLibrary* lib = Load();
  return lib;
}

Result<std::unique_ptr<CudnnConv>> CudnnConv::Create(const CudnnLibrary& lib, cudnnHandle_t handle,
                                                     const ConvShape& s, bool allow_tf32,
                                                     size_t workspace_bytes) {
  std::unique_ptr<CudnnConv> c(new CudnnConv(lib, handle, s));
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  auto step = [&](cudnnStatus_t st) {
    if (status == CUDNN_STATUS_SUCCESS) status = st;
  };
  step(lib.cudnnCreateTensorDescriptor(&c->x_));
  step(lib.cudnnCreateTensorDescriptor(&c->y_));
  step(lib.cudnnCreateFilterDescriptor(&c->w_));
  step(lib.cudnnCreateConvolutionDescriptor(&c->conv_));
  if (status != CUDNN_STATUS_SUCCESS) {
    return Unavailable(std::string("cuDNN descriptors: ") + lib.cudnnGetErrorString(status));
  }
  step(lib.cudnnSetTensor4dDescriptor(c->x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, I(s.n), I(s.c),
                                      I(s.h), I(s.w)));
  step(lib.cudnnSetTensor4dDescriptor(c->y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, I(s.n), I(s.o),
                                      I(s.ho), I(s.wo)));
  step(lib.cudnnSetFilter4dDescriptor(c->w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, I(s.o),
                                      I(s.c / s.groups), I(s.kh), I(s.kw)));
  // Cross-correlation, as ONNX's Conv and PyTorch's conv2d compute.
  step(lib.cudnnSetConvolution2dDescriptor(c->conv_, I(s.ph), I(s.pw), I(s.sh), I(s.sw), 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  step(lib.cudnnSetConvolutionGroupCount(c->conv_, I(s.groups)));
  cudnnMathType_t math = allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  step(lib.cudnnSetConvolutionMathType(c->conv_, math));
  if (status != CUDNN_STATUS_SUCCESS) {
    return Unavailable(std::string("cuDNN convolution setup: ") + lib.cudnnGetErrorString(status));
  }
  // Every candidate: an algorithm may come once per math type, and the FMA entries that FP32
  // needs can sit past the first few.
  int candidates = 0;
  status = lib.cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &candidates);
  if (status != CUDNN_STATUS_SUCCESS || candidates <= 0) {
    return Unavailable(std::string("cuDNN algorithm count: ") + lib.cudnnGetErrorString(status));
  }
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(candidates));
  int found = 0;
  status = lib.cudnnGetConvolutionForwardAlgorithm_v7(handle, c->x_, c->w_, c->conv_, c->y_,
                                                      candidates, &found, perf.data());
  if (status != CUDNN_STATUS_SUCCESS) {
    return Unavailable(std::string("cuDNN heuristics: ") + lib.cudnnGetErrorString(status));
  }
  for (int i = 0; i < found && i < candidates; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& p = perf[static_cast<size_t>(i)];
    // Without TF32 only FP32 arithmetic (FMA math) qualifies; never a down-conversion of the
    // FP32 data to FP16 (ALLOW_CONVERSION).
    bool math_ok = p.mathType == CUDNN_FMA_MATH ||
                   (allow_tf32 && p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
    if (p.status == CUDNN_STATUS_SUCCESS && p.memory <= workspace_bytes && math_ok &&
        lib.cudnnSetConvolutionMathType(c->conv_, p.mathType) == CUDNN_STATUS_SUCCESS) {
      c->algo_ = p.algo;
      c->workspace_bytes_ = p.memory;
      return c;
    }
  }
  return Unavailable("cuDNN has no algorithm for this convolution within " +
                     std::to_string(workspace_bytes) + " bytes of workspace");
}

CudnnConv::~CudnnConv() {
  if (conv_ != nullptr) lib_.cudnnDestroyConvolutionDescriptor(conv_);
  if (w_ != nullptr) lib_.cudnnDestroyFilterDescriptor(w_);
  if (y_ != nullptr) lib_.cudnnDestroyTensorDescriptor(y_);
  if (x_ != nullptr) lib_.cudnnDestroyTensorDescriptor(x_);
}

Status CudnnConv::Run(const float* x, const float* weight, const float* bias, float* y,
                      void* workspace, cudaStream_t stream) const {
  const float alpha = 1.f, beta = 0.f;
  cudnnStatus_t ran = lib_.cudnnConvolutionForward(handle_, &alpha, x_, x, w_, weight, conv_, algo_,
                                                   workspace, workspace_bytes_, &beta, y_, y);
  if (ran != CUDNN_STATUS_SUCCESS) {
    return Internal(std::string("cuDNN: conv2d: ") + lib_.cudnnGetErrorString(ran));
  }
  if (bias != nullptr) {
    cudaError_t e = ChannelBias(y, bias, shape_.n, shape_.o, shape_.ho * shape_.wo, stream);
    if (e != cudaSuccess) {
      return Internal(std::string("CUDA: conv2d bias: ") + cudaGetErrorString(e));
    }
  }
  return OkStatus();
}

}  // namespace ferry::cuda
