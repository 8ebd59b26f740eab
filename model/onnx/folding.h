// Shape computations folded at import (internal to model/onnx/). PyTorch exports
// `x.view(x.size(0), -1, h, d)`, `ids.size(1)`, `buffer[:, :seq]` and `mask.expand(...)` as
// chains of Shape, Gather, Unsqueeze, Concat, Slice, ConstantOfShape, Equal, Where and Expand on
// small integer tensors. None of them computes on request data, so the importer evaluates them
// here and the program holds only their result: a Reshape's target, a slice of a buffer, a
// constant added to the activations. The batch size is unknown at import; it travels through
// the folding as a mark on its element (ConstTensor::batch_size) and reaches a Reshape's first
// value or an Expand's first axis, where it means "the batch axis, kept". Any other use of it
// (arithmetic, a comparison with a positive number) is refused rather than guessed.
//
// Each fold converter runs only when every input of its node is a constant (OpEntry::fold),
// and refuses results over kMaxFoldedElements.
//
// Thread safety: pure functions of the converter they are given.
#pragma once

#include "model/onnx/converter.h"
#include "model/onnx/op_helpers.h"

namespace ferry::onnx_import {

// Helpers of the folds (folding.cc).
// The element count of `dims`, or nullopt when a dim is negative or the count exceeds
// kMaxFoldedElements (checked before anything is allocated).
std::optional<int64_t> CountOf(const Shape& dims);
Error TooLarge(Converter& c, const Shape& dims);
// The numpy broadcast of `shapes`, or nullopt.
std::optional<Shape> BroadcastDims(const std::vector<Shape>& shapes);
// Whether a result of rank `rank` is batch_broadcast: some operand is, and each such operand
// keeps its batch axis at axis 0 of the result (else an error).
Result<bool> BatchBroadcast(Converter& c, const std::vector<const ConstTensor*>& in, size_t rank);

// Calls f(index of each operand) for every element of `out` in row-major order, each operand
// of `shapes` broadcast to `out`.
template <typename F>
void ForEachBroadcast(const Shape& out, const std::vector<Shape>& shapes, F f) {
  size_t rank = out.size();
  std::vector<std::vector<int64_t>> strides;
  for (const Shape& s : shapes) {
    std::vector<int64_t> st(rank, 0);
    int64_t stride = 1;
    for (size_t i = s.size(); i-- > 0;) {
      st[rank - s.size() + i] = s[i] == 1 ? 0 : stride;
      stride *= s[i];
    }
    strides.push_back(std::move(st));
  }
  int64_t total = Product(out, 0);
  std::vector<int64_t> coord(rank, 0), at(shapes.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    f(at);
    for (size_t d = rank; d-- > 0;) {
      bool carry = ++coord[d] == out[d];
      for (size_t k = 0; k < shapes.size(); ++k) {
        at[k] += carry ? -strides[k][d] * (out[d] - 1) : strides[k][d];
      }
      if (!carry) {
        break;
      }
      coord[d] = 0;
    }
  }
}

// Converters that take tensors too.
Status ShapeOf(Converter& c, Attributes& attrs);
Status SliceOp(Converter& c, Attributes& attrs);
Status Expand(Converter& c, Attributes& attrs);
Status FoldExpand(Converter& c, Attributes& attrs);
Status GatherOfTensor(Converter& c, Attributes& attrs);

// Fold-only ops: every input a constant.
Status ConstantOfShape(Converter& c, Attributes& attrs);
Status Range(Converter& c, Attributes& attrs);
Status Equal(Converter& c, Attributes& attrs);
Status Where(Converter& c, Attributes& attrs);
Status Concat(Converter& c, Attributes& attrs);

// Folds of ops whose tensor form is converted in onnx_ops.cc / onnx_tensor_ops.cc.
Status FoldSlice(Converter& c, Attributes& attrs);
Status FoldGather(Converter& c, Attributes& attrs);
Status FoldUnsqueeze(Converter& c, Attributes& attrs);
Status FoldSqueeze(Converter& c, Attributes& attrs);
Status FoldCast(Converter& c, Attributes& attrs);
Status FoldReshape(Converter& c, Attributes& attrs);
Status FoldAdd(Converter& c, Attributes& attrs);
Status FoldSub(Converter& c, Attributes& attrs);
Status FoldMul(Converter& c, Attributes& attrs);
Status FoldDiv(Converter& c, Attributes& attrs);
Status FoldPow(Converter& c, Attributes& attrs);

}  // namespace ferry::onnx_import
