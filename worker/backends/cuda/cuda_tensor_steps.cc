// The CUDA steps of the tensor ops imported models bring: broadcasting arithmetic, transpose,
// matmul of two computed tensors (cuBLAS strided batched GEMM), slice and concat (2-D copies),
// gather, the reductions, log_softmax, arg_max and average pooling. Their per-element
// arithmetic is device_math.h's, tested on the host by device_math_test.
#include "worker/backends/cuda/cuda_backend_impl.h"
#include "worker/backends/cuda/device_plans.h"

namespace ferry {
namespace {

// REQUIRES: IsBinaryElementwise(kind).
cuda::BinaryOp BinaryOf(OpKind kind) {
  switch (kind) {
    case OpKind::kSub:
      return cuda::BinaryOp::kSub;
    case OpKind::kMul:
      return cuda::BinaryOp::kMul;
    case OpKind::kDiv:
      return cuda::BinaryOp::kDiv;
    default:
      return cuda::BinaryOp::kAdd;
  }
}

// REQUIRES: kind is a reduction, log_softmax or arg_max.
cuda::AxisOp AxisOpOf(OpKind kind) {
  switch (kind) {
    case OpKind::kReduceSum:
      return cuda::AxisOp::kReduceSum;
    case OpKind::kReduceMax:
      return cuda::AxisOp::kReduceMax;
    case OpKind::kLogSoftmax:
      return cuda::AxisOp::kLogSoftmax;
    case OpKind::kArgMax:
      return cuda::AxisOp::kArgMax;
    default:
      return cuda::AxisOp::kReduceMean;
  }
}

int64_t Count(const Shape& shape) { return *NumElements(shape); }

}  // namespace

// add, sub, mul, div: one flat kernel when both operands have y's shape, else the broadcast
// kernel. A weight operand comes first when the op is `reverse` (weight OP input).
Status CudaBackend::Impl::AddBinaryStep(const Model& m, Executable* exe, const Op& op) {
  DeviceTensor x = exe->tensors.at(op.inputs[0]);
  DeviceTensor y = exe->tensors.at(op.output);
  DeviceTensor other;
  if (op.inputs.size() == 2) {
    other = exe->tensors.at(op.inputs[1]);
  } else {
    other = {const_cast<float*>(WeightPtr(m, op.weight)), m.weights.at(op.weight).shape};
  }
  DeviceTensor a = op.reverse ? other : x, b = op.reverse ? x : other;
  int64_t count = Count(y.shape);
  if (op.kind == OpKind::kAdd && a.shape == y.shape && b.shape == y.shape) {
    exe->steps.push_back([=, this](cudaStream_t s) {
      return Check(cuda::Add(a.data, b.data, y.data, count, s), "add");
    });
    return OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(cuda::StridedView view, cuda::BroadcastView(a.shape, b.shape, y.shape));
  cuda::BinaryOp binary = BinaryOf(op.kind);
  exe->steps.push_back([=, this](cudaStream_t s) {
    return Check(cuda::Broadcast(a.data, b.data, y.data, view, binary, count, s), "broadcast");
  });
  return OkStatus();
}

// y[b] = x[b] w[b] for every leading index b: x [.., M, K], w [.., K, P] (equal leading axes,
// as the importer and shape inference require). Row-major y = x w is column-major
// y^T = w^T x^T, so cuBLAS gets w first.
void CudaBackend::Impl::AddMatMulStep(const Model& m, Executable* exe, const Op& op) {
  DeviceTensor x = exe->tensors.at(op.inputs[0]);
  DeviceTensor w = exe->tensors.at(op.inputs[1]);
  DeviceTensor y = exe->tensors.at(op.output);
  int64_t rows = x.shape[x.shape.size() - 2], k = x.shape.back(), p = y.shape.back();
  int64_t batches = Count(x.shape) / (rows * k);
  cublasComputeType_t compute = m.bundle->manifest.precision == Precision::kTf32
                                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
  exe->steps.push_back([=, this](cudaStream_t) -> Status {
    const float alpha = 1.f, beta = 0.f;
    return Check(
        cublasGemmStridedBatchedEx(
            cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(p), static_cast<int>(rows),
            static_cast<int>(k), &alpha, w.data, CUDA_R_32F, static_cast<int>(p), k * p, x.data,
            CUDA_R_32F, static_cast<int>(k), rows * k, &beta, y.data, CUDA_R_32F,
            static_cast<int>(p), rows * p, static_cast<int>(batches), compute, CUBLAS_GEMM_DEFAULT),
        "batched GEMM");
  });
}

// Slice and concat as 2-D copies over x viewed as [outer, n, inner] around the axis.
void CudaBackend::Impl::AddCopyStep(Executable* exe, const Op& op) {
  DeviceTensor y = exe->tensors.at(op.output);
  AxisSplit ys = SplitAround(y.shape, op.axis);
  struct Piece {
    const float* from;
    float* to;
    size_t width, src_pitch;
  };
  std::vector<Piece> pieces;
  size_t dst_pitch = static_cast<size_t>(ys.n * ys.inner) * 4;
  if (op.kind == OpKind::kSlice) {
    DeviceTensor x = exe->tensors.at(op.inputs[0]);
    AxisSplit xs = SplitAround(x.shape, op.axis);
    pieces.push_back({x.data + op.start * xs.inner, y.data, dst_pitch,
                      static_cast<size_t>(xs.n * xs.inner) * 4});
  } else {  // kConcat: each part fills its run of the axis in every outer block.
    int64_t at = 0;
    for (const std::string& in : op.inputs) {
      DeviceTensor part = exe->tensors.at(in);
      AxisSplit ps = SplitAround(part.shape, op.axis);
      size_t width = static_cast<size_t>(ps.n * ps.inner) * 4;
      pieces.push_back({part.data, y.data + at * ys.inner, width, width});
      at += ps.n;
    }
  }
  auto height = static_cast<size_t>(ys.outer);
  exe->steps.push_back([=, this](cudaStream_t s) -> Status {
    for (const Piece& p : pieces) {
      FERRY_RETURN_IF_ERROR(Check(cudaMemcpy2DAsync(p.to, dst_pitch, p.from, p.src_pitch, p.width,
                                                    height, cudaMemcpyDeviceToDevice, s),
                                  "slice/concat copy"));
    }
    return OkStatus();
  });
}

// The other tensor ops: transpose, gather, the ops along one axis, average pooling.
Status CudaBackend::Impl::AddTensorStep(const Model& m, Executable* exe, const Op& op) {
  if (IsBinaryElementwise(op.kind)) {
    return AddBinaryStep(m, exe, op);
  }
  DeviceTensor x = exe->tensors.at(op.inputs[0]);
  DeviceTensor y = exe->tensors.at(op.output);
  int64_t count = Count(y.shape);
  switch (op.kind) {
    case OpKind::kMatMul:
      AddMatMulStep(m, exe, op);
      return OkStatus();
    case OpKind::kSlice:
    case OpKind::kConcat:
      AddCopyStep(exe, op);
      return OkStatus();
    case OpKind::kTranspose: {
      FERRY_ASSIGN_OR_RETURN(cuda::StridedView view, cuda::TransposeView(x.shape, op.perm));
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::Permute(x.data, y.data, view, count, s), "transpose");
      });
      return OkStatus();
    }
    case OpKind::kGather: {
      const float* table = WeightPtr(m, op.weight);
      const Shape& ts = m.weights.at(op.weight).shape;
      int64_t rows = ts[0], width = ts[1];
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::Gather(x.data, table, y.data, rows, width, count, s), "gather");
      });
      return OkStatus();
    }
    case OpKind::kAvgPool2d: {
      cuda::PoolShape ps{x.shape[0] * x.shape[1],
                         x.shape[2],
                         x.shape[3],
                         op.kernel[0],
                         op.kernel[1],
                         op.stride[0],
                         op.stride[1],
                         op.padding[0],
                         op.padding[1],
                         y.shape[2],
                         y.shape[3]};
      bool count_pad = op.count_pad;
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(cuda::AvgPool2d(x.data, y.data, ps, count_pad, s), "avgpool2d");
      });
      return OkStatus();
    }
    case OpKind::kReduceMean:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kLogSoftmax:
    case OpKind::kArgMax: {
      AxisSplit split = SplitAround(x.shape, op.axis);
      cuda::AxisOp axis_op = AxisOpOf(op.kind);
      bool last = op.last_index;
      exe->steps.push_back([=, this](cudaStream_t s) {
        return Check(
            cuda::AlongAxis(x.data, y.data, split.outer, split.n, split.inner, axis_op, last, s),
            "axis op");
      });
      return OkStatus();
    }
    default:
      return Internal("model '" + m.bundle->manifest.name + "': the CUDA backend has no step for " +
                      std::string(OpKindName(op.kind)));
  }
}

}  // namespace ferry
