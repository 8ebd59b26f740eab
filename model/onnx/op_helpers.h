// Helpers shared by the op converters (internal to model/onnx/): shapes in messages, axes,
// per-channel constants, and the converters of the spatial ops (onnx_spatial_ops.cc) that the
// op table in onnx_ops.cc names.
//
// Thread safety: pure functions of their arguments and the converter they are given.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/onnx/converter.h"

namespace ferry::onnx_import {

// "[N, 3, 224, 224]": the batch axis as N.
std::string Dims(const Shape& shape);
// `axis` counted from the front; nullopt when outside [-rank, rank).
std::optional<int64_t> NormalAxis(int64_t axis, size_t rank);
// The product of shape[from..], all of them fixed (not the batch axis).
int64_t Product(const Shape& shape, size_t from);
// A constant per-channel vector of `channels` values: dims [channels] or [1, ..., channels],
// or one value repeated.
Result<std::vector<float>> ChannelVector(Converter& c, const ConstTensor& t, int64_t channels,
                                         const std::string& what);

Status Conv(Converter& c, Attributes& attrs);
Status BatchNormalization(Converter& c, Attributes& attrs);
Status MaxPool(Converter& c, Attributes& attrs);
Status AveragePool(Converter& c, Attributes& attrs);
Status GlobalAveragePool(Converter& c, Attributes& attrs);

// onnx_tensor_ops.cc: arithmetic with broadcasting (`kind` add, sub, mul or div; a constant
// operand becomes a weight), Neg, Reciprocal, Pow by a constant, Transpose, MatMul of two
// computed tensors, Unsqueeze, Squeeze.
Status Binary(Converter& c, OpKind kind);
Status Sub(Converter& c, Attributes& attrs);
Status Mul(Converter& c, Attributes& attrs);
Status Div(Converter& c, Attributes& attrs);
Status Transpose(Converter& c, Attributes& attrs);
Status MatMulOfTensors(Converter& c, const Value& a, const Value& b);
Status Neg(Converter& c, Attributes& attrs);
Status Reciprocal(Converter& c, Attributes& attrs);
Status Pow(Converter& c, Attributes& attrs);
Status Unsqueeze(Converter& c, Attributes& attrs);
Status Squeeze(Converter& c, Attributes& attrs);

// onnx_nn_ops.cc: the piecewise activations, Softmax and LogSoftmax, the reductions of one
// axis (and the spatial mean), Concat of computed tensors, Split (into slices) and Pad by zeros.
Status LeakyRelu(Converter& c, Attributes& attrs);
Status HardSigmoid(Converter& c, Attributes& attrs);
Status HardSwish(Converter& c, Attributes& attrs);
Status Softmax(Converter& c, Attributes& attrs);
Status LogSoftmax(Converter& c, Attributes& attrs);
Status ReduceMean(Converter& c, Attributes& attrs);
Status ReduceSum(Converter& c, Attributes& attrs);
Status ReduceMax(Converter& c, Attributes& attrs);
Status ArgMax(Converter& c, Attributes& attrs);
Status ConcatTensors(Converter& c, Attributes& attrs);
Status Split(Converter& c, Attributes& attrs);
Status Pad(Converter& c, Attributes& attrs);

}  // namespace ferry::onnx_import
