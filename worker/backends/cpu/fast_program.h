// FastProgram: one (shape variant, compiled batch size) of a bundle compiled for the CPU's
// fast path. Dense, conv2d and maxpool2d run as oneDNN primitives (JIT kernels for the CPU
// found at run time, fp32 accumulation); a dense or conv2d followed by an activation that
// only it feeds runs as one primitive with the activation fused as a post-op, as on the GPU.
// Pooling and the residual add run as oneDNN primitives too. A convolution's output stays in
// the blocked layout its kernel chose for as long as its readers are convolutions, pooling, adds
// and zero-keeping activations; it is reordered into the plain row-major buffer once, for the
// first reader that needs it (and for a model output). The remaining ops (layernorm, broadcast
// arithmetic, transposes, reshapes) are float loops over plain buffers.
// Every tensor's buffer is allocated once here, so Run() allocates nothing.
//
// The reference executor (worker/backends/cpu/ops.h, double accumulation) checks this path: tests
// hold the two within 1e-5 relative on every example and fixture.
//
// Thread safety: Run() from one thread at a time; oneDNN parallelises inside each primitive
// with OpenMP, using the calling thread's omp_set_num_threads() setting.
// Lifetime: the bundle and `weights` passed to Build must outlive the program (weights are
// used in place).
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/bundle.h"

namespace ferry::cpu {

struct ProgramState;  // program_state.h

class FastProgram {
 public:
  using WeightMap = std::map<std::string, std::vector<float>>;

  // `shapes` holds the concrete shape of every tensor at this (variant, size).
  // INTERNAL when oneDNN cannot build a primitive for an op (named by index).
  // `weights` holds the bundle's weights converted to fp32.
  static Result<std::unique_ptr<FastProgram>> Build(const Bundle& bundle,
                                                    const std::map<std::string, Shape>& shapes,
                                                    const WeightMap& weights);
  ~FastProgram();
  FastProgram(const FastProgram&) = delete;
  FastProgram& operator=(const FastProgram&) = delete;

  // The buffer of manifest input i / output o (the whole batch, row-major).
  std::span<float> Input(size_t i);
  std::span<const float> Output(size_t o) const;

  // Runs every op. INTERNAL with the op index when oneDNN fails.
  Status Run();

 private:
  class Compiler;  // Turns a manifest's ops into ProgramState's steps (fast_program.cc).
  explicit FastProgram(std::unique_ptr<ProgramState> state);
  std::unique_ptr<ProgramState> state_;
};

}  // namespace ferry::cpu
