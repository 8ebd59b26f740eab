#include <cuda_bf16.h>

#include <cfloat>

#include "worker/backends/cuda/kernels.h"

namespace ferry::cuda {
namespace {

constexpr int kThreads = 256;

// At least one block (a launch of none is an error; its loop then runs zero times), at most
// 65535 * 16 (the kernels stride over the rest).
unsigned Blocks(int64_t count) {
  int64_t blocks = count < 1 ? 1 : (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

__device__ float Activate(float v, int act, float alpha = 0.f, float beta = 0.f) {
  switch (act) {
    case 1:
      return v > 0.f ? v : 0.f;
    case 2:
      return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case 3:
      return tanhf(v);
    case 4:
      return 1.f / (1.f + expf(-v));
    case 5:
      return v < 0.f ? alpha * v : v;
    case 6:
      return fminf(fmaxf(alpha * v + beta, 0.f), 1.f);
    case 7:
      return v * fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f);
    case 8:
      return sqrtf(v);
    case 9:
      return expf(v);
    case 10:
      return logf(v);
    default:
      return v;
  }
}

__global__ void BiasActivationKernel(float* y, const float* bias, int64_t m, int64_t n, int act) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = y[i] + (bias != nullptr ? bias[i % n] : 0.f);
    y[i] = Activate(v, act);
  }
}

__global__ void ElementwiseKernel(const float* x, float* y, int64_t count, int act, float alpha,
                                  float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = Activate(x[i], act, alpha, beta);
  }
}

__global__ void ClipKernel(const float* x, float* y, int64_t count, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = fminf(fmaxf(x[i], lo), hi);
  }
}

__global__ void AddKernel(const float* a, const float* b, float* y, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = a[i] + b[i];
  }
}

// One thread per (outer, inner) line, grid-stride so every line is computed however many
// there are (the grid is capped by Blocks()); fine for the narrow softmaxes of classifier
// heads.
__global__ void SoftmaxKernel(const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t line = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; line < outer * inner;
       line += int64_t{gridDim.x} * blockDim.x) {
    int64_t o = line / inner, in = line % inner;
    const float* xs = x + o * n * inner + in;
    float* ys = y + o * n * inner + in;
    float max = -FLT_MAX;
    for (int64_t i = 0; i < n; ++i) {
      max = fmaxf(max, xs[i * inner]);
    }
    float sum = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      sum += expf(xs[i * inner] - max);
    }
    for (int64_t i = 0; i < n; ++i) {
      ys[i * inner] = expf(xs[i * inner] - max) / sum;
    }
  }
}

// One block per row: a shared-memory reduction for mean and variance.
__global__ void LayerNormKernel(const float* x, const float* w, const float* b, float* y, int64_t d,
                                float eps) {
  __shared__ float partial[kThreads];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    sum += xr[i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    }
    __syncthreads();
  }
  float mean = partial[0] / d;
  __syncthreads();
  float var = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    var += (xr[i] - mean) * (xr[i] - mean);
  }
  partial[threadIdx.x] = var;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    }
    __syncthreads();
  }
  float inv = rsqrtf(partial[0] / d + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

__global__ void Conv2dKernel(const float* x, const float* weight, const float* bias, float* y,
                             ConvShape s) {
  int64_t total = s.n * s.o * s.ho * s.wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ox = i % s.wo, oy = (i / s.wo) % s.ho, o = (i / (s.wo * s.ho)) % s.o,
            n = i / (s.wo * s.ho * s.o);
    float sum = bias != nullptr ? bias[o] : 0.f;
    int64_t c_group = s.c / s.groups, first = (o / (s.o / s.groups)) * c_group;
    for (int64_t cg = 0; cg < c_group; ++cg) {
      int64_t c = first + cg;
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        int64_t iy = oy * s.sh - s.ph + ky;
        if (iy < 0 || iy >= s.h) {
          continue;
        }
        for (int64_t kx = 0; kx < s.kw; ++kx) {
          int64_t ix = ox * s.sw - s.pw + kx;
          if (ix >= 0 && ix < s.w) {
            sum += x[((n * s.c + c) * s.h + iy) * s.w + ix] *
                   weight[((o * c_group + cg) * s.kh + ky) * s.kw + kx];
          }
        }
      }
    }
    y[i] = sum;
  }
}

__global__ void MaxPoolKernel(const float* x, float* y, ConvShape s) {
  int64_t total = s.n * s.c * s.ho * s.wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ox = i % s.wo, oy = (i / s.wo) % s.ho, plane = i / (s.wo * s.ho);
    float best = -INFINITY;  // As the CPU reference, for a window wholly in the padding.
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      int64_t iy = oy * s.sh - s.ph + ky;
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        int64_t ix = ox * s.sw - s.pw + kx;
        if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) {
          best = fmaxf(best, x[(plane * s.h + iy) * s.w + ix]);
        }
      }
    }
    y[i] = best;
  }
}

// Grid-stride over planes: every plane is computed however many there are.
__global__ void GlobalAvgPoolKernel(const float* x, float* y, int64_t planes, int64_t area) {
  for (int64_t plane = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; plane < planes;
       plane += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.f;
    for (int64_t i = 0; i < area; ++i) {
      sum += x[plane * area + i];
    }
    y[plane] = sum / area;
  }
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

__global__ void FromBf16Kernel(const __nv_bfloat16* x, float* y, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __bfloat162float(x[i]);
  }
}

__global__ void BroadcastKernel(const float* a, const float* b, float* y, StridedView view,
                                BinaryOp op, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = BroadcastAt(view, op, a, b, i);
  }
}

__global__ void PermuteKernel(const float* x, float* y, StridedView view, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t from = 0, unused = 0;
    SourceOffsets(view, i, &from, &unused);
    y[i] = x[from];
  }
}

__global__ void GatherKernel(const float* ids, const float* table, float* y, int64_t rows,
                             int64_t width, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = GatherAt(ids, table, rows, width, i);
  }
}

// One thread per line, grid-stride (as SoftmaxKernel).
__global__ void AlongAxisKernel(const float* x, float* y, int64_t lines, int64_t n, int64_t inner,
                                AxisOp op, bool last) {
  for (int64_t line = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; line < lines;
       line += int64_t{gridDim.x} * blockDim.x) {
    AxisLine(op, x, y, n, inner, line, last);
  }
}

__global__ void AvgPoolKernel(const float* x, float* y, PoolShape s, bool count_pad) {
  int64_t total = s.planes * s.ho * s.wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = AvgPoolAt(x, s, count_pad, i);
  }
}

__global__ void ChannelBiasKernel(float* y, const float* bias, int64_t c, int64_t area,
                                  int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[(i / area) % c];
  }
}

}  // namespace

cudaError_t ChannelBias(float* y, const float* bias, int64_t n, int64_t c, int64_t area,
                        cudaStream_t stream) {
  int64_t count = n * c * area;
  ChannelBiasKernel<<<Blocks(count), kThreads, 0, stream>>>(y, bias, c, area, count);
  return cudaGetLastError();
}

cudaError_t Broadcast(const float* a, const float* b, float* y, const StridedView& view,
                      BinaryOp op, int64_t count, cudaStream_t stream) {
  BroadcastKernel<<<Blocks(count), kThreads, 0, stream>>>(a, b, y, view, op, count);
  return cudaGetLastError();
}

cudaError_t Permute(const float* x, float* y, const StridedView& view, int64_t count,
                    cudaStream_t stream) {
  PermuteKernel<<<Blocks(count), kThreads, 0, stream>>>(x, y, view, count);
  return cudaGetLastError();
}

cudaError_t Gather(const float* ids, const float* table, float* y, int64_t rows, int64_t width,
                   int64_t count, cudaStream_t stream) {
  GatherKernel<<<Blocks(count), kThreads, 0, stream>>>(ids, table, y, rows, width, count);
  return cudaGetLastError();
}

cudaError_t AlongAxis(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, AxisOp op,
                      bool last, cudaStream_t stream) {
  AlongAxisKernel<<<Blocks(outer * inner), kThreads, 0, stream>>>(x, y, outer * inner, n, inner, op,
                                                                  last);
  return cudaGetLastError();
}

cudaError_t AvgPool2d(const float* x, float* y, const PoolShape& s, bool count_pad,
                      cudaStream_t stream) {
  AvgPoolKernel<<<Blocks(s.planes * s.ho * s.wo), kThreads, 0, stream>>>(x, y, s, count_pad);
  return cudaGetLastError();
}

cudaError_t BiasActivation(float* y, const float* bias, int64_t m, int64_t n, Activation act,
                           cudaStream_t stream) {
  BiasActivationKernel<<<Blocks(m * n), kThreads, 0, stream>>>(y, bias, m, n,
                                                               static_cast<int>(act));
  return cudaGetLastError();
}

cudaError_t Elementwise(const float* x, float* y, int64_t count, Activation act,
                        cudaStream_t stream, float alpha, float beta) {
  ElementwiseKernel<<<Blocks(count), kThreads, 0, stream>>>(x, y, count, static_cast<int>(act),
                                                            alpha, beta);
  return cudaGetLastError();
}

cudaError_t Clip(const float* x, float* y, int64_t count, float lo, float hi, cudaStream_t stream) {
  ClipKernel<<<Blocks(count), kThreads, 0, stream>>>(x, y, count, lo, hi);
  return cudaGetLastError();
}

cudaError_t Add(const float* a, const float* b, float* y, int64_t count, cudaStream_t stream) {
  AddKernel<<<Blocks(count), kThreads, 0, stream>>>(a, b, y, count);
  return cudaGetLastError();
}

cudaError_t Softmax(const float* x, float* y, int64_t outer, int64_t n, int64_t inner,
                    cudaStream_t stream) {
  SoftmaxKernel<<<Blocks(outer * inner), kThreads, 0, stream>>>(x, y, outer, n, inner);
  return cudaGetLastError();
}

cudaError_t LayerNorm(const float* x, const float* w, const float* b, float* y, int64_t rows,
                      int64_t d, float eps, cudaStream_t stream) {
  LayerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, b, y, d, eps);
  return cudaGetLastError();
}

cudaError_t Conv2d(const float* x, const float* weight, const float* bias, float* y,
                   const ConvShape& s, cudaStream_t stream) {
  Conv2dKernel<<<Blocks(s.n * s.o * s.ho * s.wo), kThreads, 0, stream>>>(x, weight, bias, y, s);
  return cudaGetLastError();
}

cudaError_t MaxPool2d(const float* x, float* y, const ConvShape& s, cudaStream_t stream) {
  MaxPoolKernel<<<Blocks(s.n * s.c * s.ho * s.wo), kThreads, 0, stream>>>(x, y, s);
  return cudaGetLastError();
}

cudaError_t GlobalAvgPool(const float* x, float* y, int64_t planes, int64_t area,
                          cudaStream_t stream) {
  GlobalAvgPoolKernel<<<Blocks(planes), kThreads, 0, stream>>>(x, y, planes, area);
  return cudaGetLastError();
}

cudaError_t FloatToBf16(const float* x, uint16_t* y, int64_t count, cudaStream_t stream) {
  ToBf16Kernel<<<Blocks(count), kThreads, 0, stream>>>(x, reinterpret_cast<__nv_bfloat16*>(y),
                                                       count);
  return cudaGetLastError();
}

cudaError_t Bf16ToFloat(const uint16_t* x, float* y, int64_t count, cudaStream_t stream) {
  FromBf16Kernel<<<Blocks(count), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x),
                                                         y, count);
  return cudaGetLastError();
}

}  // namespace ferry::cuda
