// Launchers for the CUDA backend's own kernels (everything but the GEMMs, which go through
// cuBLAS). Each enqueues on `stream` and returns the launch status; shapes follow
// worker/backends/cpu/ops.h, so the CPU executor is their reference.
//
// Thread safety: safe for concurrent use on distinct streams and buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/backends/cuda/device_math.h"

namespace ferry::cuda {

// The elementwise functions, as worker/backends/cpu/ops.h and imported_ops.h define them;
// alpha and beta are leaky_relu's slope and hard_sigmoid's alpha x + beta.
enum class Activation : int {
  kNone = 0,
  kRelu = 1,
  kGelu = 2,
  kTanh = 3,
  kSigmoid = 4,
  kLeakyRelu = 5,
  kHardSigmoid = 6,
  kHardSwish = 7,
  kSqrt = 8,
  kExp = 9,
  kLog = 10,
};

// y[m, n] = act(y[m, n] + bias[n]) in place (bias may be null).
cudaError_t BiasActivation(float* y, const float* bias, int64_t m, int64_t n, Activation act,
                           cudaStream_t stream);
// y = act(x) elementwise (x may equal y).
cudaError_t Elementwise(const float* x, float* y, int64_t count, Activation act,
                        cudaStream_t stream, float alpha = 0.f, float beta = 0.f);
cudaError_t Add(const float* a, const float* b, float* y, int64_t count, cudaStream_t stream);
// y = min(max(x, lo), hi) elementwise (x may equal y).
cudaError_t Clip(const float* x, float* y, int64_t count, float lo, float hi, cudaStream_t stream);
// Softmax over the middle axis of [outer, n, inner].
cudaError_t Softmax(const float* x, float* y, int64_t outer, int64_t n, int64_t inner,
                    cudaStream_t stream);
// LayerNorm over the last axis d of `rows` rows.
cudaError_t LayerNorm(const float* x, const float* w, const float* b, float* y, int64_t rows,
                      int64_t d, float eps, cudaStream_t stream);

struct ConvShape {
  int64_t n, c, h, w;      // Input.
  int64_t o, kh, kw;       // Weight [o, c / groups, kh, kw].
  int64_t groups;          // Output channel o reads the input channels of group o / (o / groups).
  int64_t sh, sw, ph, pw;  // Stride, padding.
  int64_t ho, wo;          // Output.
};
cudaError_t Conv2d(const float* x, const float* weight, const float* bias, float* y,
                   const ConvShape& s, cudaStream_t stream);
// y[n, c, :] += bias[c] over [n, c, area] (after a cuDNN convolution).
cudaError_t ChannelBias(float* y, const float* bias, int64_t n, int64_t c, int64_t area,
                        cudaStream_t stream);
// Max pooling with kernel (kh, kw) = (s.kh, s.kw); s.o is ignored (channels = s.c).
cudaError_t MaxPool2d(const float* x, float* y, const ConvShape& s, cudaStream_t stream);
// [n, c, h, w] -> [n, c]
cudaError_t GlobalAvgPool(const float* x, float* y, int64_t planes, int64_t area,
                          cudaStream_t stream);
// y = a OP b with numpy broadcasting through `view` (device_plans.h: BroadcastView).
cudaError_t Broadcast(const float* a, const float* b, float* y, const StridedView& view,
                      BinaryOp op, int64_t count, cudaStream_t stream);
// y = x read through `view` (TransposeView): a transpose.
cudaError_t Permute(const float* x, float* y, const StridedView& view, int64_t count,
                    cudaStream_t stream);
// y [ids, width] = rows of `table` [rows, width] picked by `ids` (GatherAt's guard).
cudaError_t Gather(const float* ids, const float* table, float* y, int64_t rows, int64_t width,
                   int64_t count, cudaStream_t stream);
// A reduction, log_softmax or arg_max along the middle axis of [outer, n, inner] (AxisLine).
cudaError_t AlongAxis(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, AxisOp op,
                      bool last, cudaStream_t stream);
// Average pooling (AvgPoolAt).
cudaError_t AvgPool2d(const float* x, float* y, const PoolShape& s, bool count_pad,
                      cudaStream_t stream);
// Conversions for bf16 GEMMs (round to nearest even).
cudaError_t FloatToBf16(const float* x, uint16_t* y, int64_t count, cudaStream_t stream);
cudaError_t Bf16ToFloat(const uint16_t* x, float* y, int64_t count, cudaStream_t stream);

}  // namespace ferry::cuda
