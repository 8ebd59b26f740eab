#include "worker/backends/cpu/epilogues.h"

namespace ferry::cpu {

std::optional<Activation> FusableActivation(const std::vector<Op>& program, size_t i,
                                            const std::map<std::string, int>& readers,
                                            const Manifest& manifest) {
  const Op& op = program[i];
  auto read = readers.find(op.output);
  if (i + 1 >= program.size() || read == readers.end() || read->second != 1 ||
      program[i + 1].inputs[0] != op.output) {
    return std::nullopt;
  }
  for (const TensorSpec& out : manifest.outputs) {
    if (out.name == op.output) {
      return std::nullopt;
    }
  }
  return AsActivation(program[i + 1]);
}

std::optional<Activation> AsActivation(const Op& op) {
  switch (op.kind) {
    case OpKind::kRelu:
      return Activation{dnnl::algorithm::eltwise_relu};
    case OpKind::kLeakyRelu:
      return Activation{dnnl::algorithm::eltwise_relu, static_cast<float>(op.alpha)};
    case OpKind::kGelu:
      return Activation{dnnl::algorithm::eltwise_gelu_erf};  // Exact GELU, as the reference.
    case OpKind::kTanh:
      return Activation{dnnl::algorithm::eltwise_tanh};
    case OpKind::kSigmoid:
      return Activation{dnnl::algorithm::eltwise_logistic};
    case OpKind::kHardSwish:  // x relu6(x + 3) / 6: ONNX's HardSwish.
      return Activation{dnnl::algorithm::eltwise_hardswish};
    case OpKind::kClip:
      return Activation{dnnl::algorithm::eltwise_clip, static_cast<float>(op.min),
                        static_cast<float>(op.max)};
    default:
      return std::nullopt;
  }
}

dnnl::primitive_attr Epilogue(std::optional<Activation> activation) {
  dnnl::primitive_attr attr;
  if (activation) {
    dnnl::post_ops post;
    post.append_eltwise(1.f, activation->algorithm, activation->alpha, activation->beta);
    attr.set_post_ops(post);
  }
  return attr;
}

bool KeepsZero(const Op& op) {
  switch (op.kind) {
    case OpKind::kRelu:
    case OpKind::kLeakyRelu:
    case OpKind::kGelu:
    case OpKind::kTanh:
    case OpKind::kHardSwish:
      return true;
    case OpKind::kClip:
      return op.min <= 0 && op.max >= 0;
    default:
      return false;
  }
}

}  // namespace ferry::cpu
