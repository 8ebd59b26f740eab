#include "worker/backends/cpu/layouts.h"

namespace ferry::cpu {

memory::desc Layouts::Layout(const std::string& name) const {
  auto b = blocked_.find(name);
  return b != blocked_.end() ? b->second.get_desc() : PlainDesc(shapes_.at(name));
}

std::vector<float>* Layouts::Plain(const std::string& name, size_t index) {
  auto b = blocked_.find(name);
  if (b != blocked_.end() && plain_.insert(name).second) {
    AddReorder(index, b->second, s_->Wrap(PlainDesc(shapes_.at(name)), name));
  }
  return &s_->Buffer(name);
}

memory Layouts::InLayout(const std::string& name, const memory::desc& want, size_t index) {
  auto b = blocked_.find(name);
  if (b != blocked_.end() && b->second.get_desc() == want) {
    return b->second;
  }
  memory from = b != blocked_.end() ? b->second : s_->Wrap(PlainDesc(shapes_.at(name)), name);
  if (b == blocked_.end() && from.get_desc() == want) {
    return from;
  }
  memory to(want, s_->engine);
  AddReorder(index, from, to);
  return to;
}

memory Layouts::Output(const std::string& name, const memory::desc& layout) {
  memory::desc plain = PlainDesc(shapes_.at(name));
  if (layout == plain) {
    return s_->Wrap(plain, name);
  }
  memory blocked(layout, s_->engine);
  blocked_[name] = blocked;
  return blocked;
}

void Layouts::AddReorder(size_t index, memory from, memory to) {
  dnnl::reorder reorder(from, to);
  s_->steps.push_back(
      {index, [s = s_, reorder, from, to]() mutable { reorder.execute(s->stream, from, to); }});
}

}  // namespace ferry::cpu
