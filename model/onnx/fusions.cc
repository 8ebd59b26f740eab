#include "model/onnx/fusions.h"

#include <cmath>
#include <optional>
#include <vector>

namespace ferry::onnx_import {
namespace {

class Matcher {
 public:
  Matcher(const onnx::GraphProto& graph, const std::map<std::string, int>& readers,
          const OnnxModel& model)
      : readers_(readers), model_(model) {
    for (const onnx::NodeProto& node : graph.node()) {
      for (const std::string& out : node.output()) {
        producer_[out] = &node;
      }
      for (const std::string& in : node.input()) {
        consumers_[in].push_back(&node);
      }
    }
  }

  // The one node that reads `name`, when nothing else (no other node, no graph output) does.
  const onnx::NodeProto* SoleReader(const std::string& name) const {
    auto it = consumers_.find(name);
    auto r = readers_.find(name);
    if (it == consumers_.end() || it->second.size() != 1 || r == readers_.end() || r->second != 1) {
      return nullptr;
    }
    return it->second[0];
  }

  const onnx::NodeProto* Producer(const std::string& name) const {
    auto it = producer_.find(name);
    return it == producer_.end() ? nullptr : it->second;
  }

  // The value of a one-element float constant (an initializer or a Constant node's value).
  std::optional<float> Scalar(const std::string& name) const {
    if (auto it = model_.initializers.find(name); it != model_.initializers.end()) {
      const ConstTensor& t = it->second;
      return !t.integer && t.floats.size() == 1 ? std::optional<float>(t.floats[0]) : std::nullopt;
    }
    const onnx::NodeProto* node = Producer(name);
    if (node == nullptr || node->op_type() != "Constant" || node->attribute_size() != 1 ||
        node->attribute(0).name() != "value" || !node->attribute(0).has_t()) {
      return std::nullopt;
    }
    uint64_t no_external = 0;
    Result<ConstTensor> t = DecodeTensor(node->attribute(0).t(), "", &no_external);
    return t.ok() && !t->integer && t->floats.size() == 1 ? std::optional<float>(t->floats[0])
                                                          : std::nullopt;
  }

  // For a binary `node` of `op` with one operand the scalar `value` (within 1e-4): the other
  // operand's name.
  std::optional<std::string> OtherThanScalar(const onnx::NodeProto* node, const char* op,
                                             float value) const {
    if (node == nullptr || node->op_type() != op || node->input_size() != 2 ||
        !node->domain().empty()) {
      return std::nullopt;
    }
    for (int i = 0; i < 2; ++i) {
      std::optional<float> s = Scalar(node->input(i));
      if (s && std::abs(*s - value) < 1e-4f) {
        return node->input(1 - i);
      }
    }
    return std::nullopt;
  }

  // `node` is Mul(a, b) with {a, b} = {one, other}: returns `other`.
  static std::optional<std::string> MulWith(const onnx::NodeProto* node, const std::string& one) {
    if (node == nullptr || node->op_type() != "Mul" || node->input_size() != 2 ||
        !node->domain().empty()) {
      return std::nullopt;
    }
    if (node->input(0) == one) {
      return node->input(1);
    }
    if (node->input(1) == one) {
      return node->input(0);
    }
    return std::nullopt;
  }

  // GELU around `erf`; adds the match to `out`.
  void MatchGelu(const onnx::NodeProto& erf, Fusions* out) const {
    if (erf.input_size() != 1 || erf.output_size() != 1 || !erf.domain().empty()) {
      return;
    }
    const onnx::NodeProto* scale = Producer(erf.input(0));
    if (scale == nullptr || SoleReader(erf.input(0)) != &erf) {
      return;
    }
    std::optional<std::string> x = OtherThanScalar(scale, "Div", std::sqrt(2.0f));
    if (!x) {
      x = OtherThanScalar(scale, "Mul", 1.0f / std::sqrt(2.0f));
    }
    const onnx::NodeProto* add = SoleReader(erf.output(0));
    if (!x || add == nullptr || OtherThanScalar(add, "Add", 1.0f) != erf.output(0) ||
        add->output_size() != 1) {
      return;
    }
    const onnx::NodeProto* mul = SoleReader(add->output(0));
    std::optional<std::string> other = MulWith(mul, add->output(0));
    if (!other || mul->output_size() != 1) {
      return;
    }
    std::vector<const onnx::NodeProto*> nodes = {scale, &erf, add};
    const onnx::NodeProto* last = nullptr;
    if (*other == *x) {  // Mul(Mul(x, 1 + erf), 0.5)
      const onnx::NodeProto* half = SoleReader(mul->output(0));
      if (OtherThanScalar(half, "Mul", 0.5f) != mul->output(0) || half->output_size() != 1) {
        return;
      }
      nodes.push_back(mul);
      last = half;
    } else {  // Mul(Mul(x, 0.5), 1 + erf)
      const onnx::NodeProto* half = Producer(*other);
      if (SoleReader(*other) != mul || OtherThanScalar(half, "Mul", 0.5f) != *x) {
        return;
      }
      nodes.push_back(half);
      last = mul;
    }
    out->absorbed.insert(nodes.begin(), nodes.end());
    out->gelu[last] = *x;
  }

 private:
  const std::map<std::string, int>& readers_;
  const OnnxModel& model_;
  std::map<std::string, const onnx::NodeProto*> producer_;
  std::map<std::string, std::vector<const onnx::NodeProto*>> consumers_;
};

}  // namespace

Fusions FindFusions(const onnx::GraphProto& graph, const std::map<std::string, int>& readers,
                    const OnnxModel& model) {
  Matcher matcher(graph, readers, model);
  Fusions out;
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() == "Erf") {
      matcher.MatchGelu(node, &out);
    }
  }
  return out;
}

}  // namespace ferry::onnx_import
