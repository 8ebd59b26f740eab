// Where each tensor of a FastProgram lives while it is compiled (internal to
// worker/backends/cpu/): its plain row-major buffer, or a oneDNN blocked layout that a
// primitive chose for its output. A blocked tensor's plain buffer is written only for the steps
// that read it (Plain), so activations stay blocked from one convolution to the next.
//
// Thread safety: used by one compiling thread. Lifetime: `state` and `shapes` outlive it; the
// reorder steps it adds hold the memories they use.
#pragma once

#include <map>
#include <set>
#include <string>

#include "worker/backends/cpu/program_state.h"

namespace ferry::cpu {

class Layouts {
 public:
  Layouts(ProgramState* state, const std::map<std::string, Shape>& shapes)
      : s_(state), shapes_(shapes) {}

  // The layout `name` is written in: its blocked layout, or plain.
  memory::desc Layout(const std::string& name) const;
  bool Blocked(const std::string& name) const { return blocked_.count(name) > 0; }

  // The tensor's plain buffer. When its producer left it blocked, a reorder into the plain
  // buffer runs at step `index` (once: later readers share it).
  std::vector<float>* Plain(const std::string& name, size_t index);

  // The tensor in layout `want`: as written when it is in that layout, else a copy reordered
  // at step `index`.
  memory InLayout(const std::string& name, const memory::desc& want, size_t index);

  // Where a primitive writes `name` in `layout`: the plain buffer when the layout is plain,
  // else a blocked memory that readers take as it is (InLayout) or reorder (Plain).
  memory Output(const std::string& name, const memory::desc& layout);

  // Adds a step at `index` that reorders `from` into `to`.
  void AddReorder(size_t index, memory from, memory to);

 private:
  ProgramState* s_;
  const std::map<std::string, Shape>& shapes_;
  std::map<std::string, memory> blocked_;  // Tensors a primitive writes blocked.
  std::set<std::string> plain_;            // Blocked tensors whose plain buffer is written.
};

}  // namespace ferry::cpu
