// FastProgram's compiled form (internal to worker/backends/cpu/): the tensors' plain buffers,
// the oneDNN engine and stream, and the steps Run executes in order. Built by
// FastProgram::Compiler (fast_program.cc) with Layouts (layouts.h).
//
// Thread safety: one thread at a time (FastProgram's contract).
#pragma once

#include <functional>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"

namespace ferry::cpu {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

inline memory::dims Dims(const Shape& shape) { return memory::dims(shape.begin(), shape.end()); }

// Each axis' stride, in elements, when `shape` is held row-major.
inline memory::dims RowMajorStrides(const Shape& shape) {
  memory::dims strides(shape.size(), 1);
  for (size_t d = shape.size() - 1; shape.size() > 1 && d-- > 0;) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// The row-major layout of `shape`: how every ferry buffer holds its tensor.
inline memory::desc PlainDesc(const Shape& shape) {
  return memory::desc(Dims(shape), kF32, RowMajorStrides(shape));
}

struct ProgramState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::string, size_t> buffer_of;  // Tensor name -> index into buffers.
  std::vector<std::vector<float>> buffers;
  std::vector<size_t> inputs, outputs;
  std::vector<memory> owned;  // Weights reordered into the layout a primitive prefers.
  struct Step {
    size_t op_index;
    std::function<void()> run;
  };
  std::vector<Step> steps;
  // Set by a step that refuses its input (a gather index outside the table); Run stops there.
  std::optional<Error> failure;

  std::vector<float>& Buffer(const std::string& name) { return buffers[buffer_of.at(name)]; }
  memory Wrap(const memory::desc& desc, const std::string& tensor) {
    return memory(desc, engine, Buffer(tensor).data());
  }
};

}  // namespace ferry::cpu
