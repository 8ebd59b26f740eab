// The ops FastProgram (fast_program.h) runs as ferry's own float loops rather than oneDNN
// primitives: activations of plain tensors, slices, gathers, reductions and reshapes. Each works on
// plain row-major buffers (ops.h and tensor_ops.h hold the loops).
//
// Thread safety: a step runs on the thread that calls FastProgram::Run.
// Lifetime: the buffers and weights named in LoopOperands must outlive the step.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"

namespace ferry::cpu {

struct LoopOperands {
  const std::vector<float>* x;  // The op's first input.
  Shape x_shape;
  std::vector<float>* y;  // The op's output.
  Shape y_shape;
  std::span<const float> weight;  // The op's weight and bias, empty where it has none.
  std::span<const float> bias;
};

// The step that runs `op`: INVALID_ARGUMENT from a gather whose index leaves its table, else OK.
// REQUIRES: `op` passed shape inference with these shapes, and is one of the kinds listed in
// loop_steps.cc (the others are primitives: an empty function).
std::function<Status()> LoopStep(const Op& op, const LoopOperands& operands);

}  // namespace ferry::cpu
