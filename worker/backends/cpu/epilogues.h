// What a oneDNN primitive of a FastProgram absorbs from the ops after it (internal to
// worker/backends/cpu/): the activation fused into a dense's or conv2d's epilogue, and which
// activations keep a blocked layout's padding zero.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/manifest.h"

namespace ferry::cpu {

// An eltwise post-op: the algorithm and its alpha and beta (clip's range).
struct Activation {
  dnnl::algorithm algorithm;
  float alpha = 0.f;
  float beta = 0.f;
};

// The activation op at program[i + 1] when it may be fused into program[i]'s epilogue: it is
// the only reader of program[i]'s output, which is no model output. `readers` counts the ops
// reading each tensor.
std::optional<Activation> FusableActivation(const std::vector<Op>& program, size_t i,
                                            const std::map<std::string, int>& readers,
                                            const Manifest& manifest);

// The eltwise primitive or post-op that computes `op`, when one does.
std::optional<Activation> AsActivation(const Op& op);

// A primitive attribute with `activation` as its one post-op (none when nullopt).
dnnl::primitive_attr Epilogue(std::optional<Activation> activation);

// Activations a primitive may apply to a blocked tensor: f(0) = 0, so the channels that pad
// a blocked layout stay zero for the convolution that reads them next.
bool KeepsZero(const Op& op);

}  // namespace ferry::cpu
