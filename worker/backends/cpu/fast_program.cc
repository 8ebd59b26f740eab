#include "worker/backends/cpu/fast_program.h"

#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "model/shape_inference.h"
#include "worker/backends/cpu/epilogues.h"
#include "worker/backends/cpu/layouts.h"
#include "worker/backends/cpu/loop_steps.h"
#include "worker/backends/cpu/ops.h"
#include "worker/backends/cpu/tensor_ops.h"

namespace ferry::cpu {

FastProgram::FastProgram(std::unique_ptr<ProgramState> state) : state_(std::move(state)) {}
FastProgram::~FastProgram() = default;

std::span<float> FastProgram::Input(size_t i) { return state_->buffers[state_->inputs[i]]; }
std::span<const float> FastProgram::Output(size_t o) const {
  return state_->buffers[state_->outputs[o]];
}

// Turns a manifest's ops into ProgramState's steps: oneDNN primitives for dense, conv2d, matmul and
// softmax (with weights reordered once into the layout each prefers), ferry's loops for the rest.
class FastProgram::Compiler {
 public:
  Compiler(const Bundle& bundle, const std::map<std::string, Shape>& shapes,
           const WeightMap& weights, ProgramState* s)
      : bundle_(bundle),
        manifest_(bundle.manifest),
        shapes_(shapes),
        weights_(weights),
        s(s),
        layouts_(s, shapes) {
    for (const Op& op : manifest_.program) {
      for (const std::string& in : op.inputs) {
        ++readers_[in];
      }
    }
  }

  // Makes every model output's plain buffer hold its value after the last step.
  void Finish() {
    for (const TensorSpec& out : manifest_.outputs) {
      layouts_.Plain(out.name, manifest_.program.empty() ? 0 : manifest_.program.size() - 1);
    }
  }

  // Adds program[i]'s steps; returns the index of the last op they cover (i, or a later one
  // when the ops after it were fused into its primitive). oneDNN's errors are thrown as
  // dnnl::error.
  size_t Add(size_t i) {
    const Op& op = manifest_.program[i];
    switch (op.kind) {
      case OpKind::kDense:
      case OpKind::kConv2d:
        return AddDenseOrConv(i);
      case OpKind::kAdd:
        if (op.inputs.size() == 2 && shapes_.at(op.inputs[0]) == shapes_.at(op.inputs[1]) &&
            (layouts_.Blocked(op.inputs[0]) || layouts_.Blocked(op.inputs[1]))) {
          return AddBlockedSum(i,
                               layouts_.Layout(op.inputs[layouts_.Blocked(op.inputs[0]) ? 0 : 1]));
        }
        AddBroadcast(i, op);
        return i;
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv:
        AddBroadcast(i, op);
        return i;
      case OpKind::kMatMul:
        return AddMatMul(i);
      case OpKind::kSoftmax:
      case OpKind::kLogSoftmax:
        AddSoftmax(i, op);
        return i;
      case OpKind::kLayerNorm:
        AddLayerNorm(i, op);
        return i;
      case OpKind::kTranspose:
        AddTranspose(i, op);
        return i;
      case OpKind::kMaxPool2d:
      case OpKind::kAvgPool2d:
      case OpKind::kGlobalAvgPool:
        AddPool(i, op);
        return i;
      case OpKind::kLeakyRelu:
      case OpKind::kHardSwish:
        AddActivation(i, op,
                      layouts_.Blocked(op.inputs[0]) ? layouts_.Layout(op.inputs[0])
                                                     : PlainDesc(shapes_.at(op.inputs[0])));
        return i;
      case OpKind::kConcat:
        AddConcat(i, op);
        return i;
      default:
        if (layouts_.Blocked(op.inputs[0]) && KeepsZero(op)) {
          AddActivation(i, op, layouts_.Layout(op.inputs[0]));
          return i;
        }
        AddLoop(i, op);
        return i;
    }
  }

 private:
  std::span<const float> Weight(const std::string& name) const {
    return name.empty() ? std::span<const float>() : std::span<const float>(weights_.at(name));
  }
  memory WeightMemory(const memory::desc& desc, const std::string& name) const {
    return memory(desc, s->engine, const_cast<float*>(weights_.at(name).data()));
  }
  // The weights in the layout the primitive chose (blocked for its kernels), reordered once.
  memory PackedWeights(const memory::desc& chosen, const memory::desc& user,
                       const std::string& name) {
    memory from = WeightMemory(user, name);
    if (chosen == user) {
      return from;
    }
    memory packed(chosen, s->engine);
    dnnl::reorder(from, packed).execute(s->stream, from, packed);
    s->stream.wait();
    s->owned.push_back(packed);
    return packed;
  }

  // Dense (oneDNN matmul) or conv2d, with the next op's activation fused when it may be.
  size_t AddDenseOrConv(size_t i) {
    const std::vector<Op>& program = manifest_.program;
    const std::map<std::string, int>& readers = readers_;
    const Manifest& manifest = manifest_;
    const Bundle& bundle = bundle_;
    const Op& op = program[i];
    size_t index = i;
    const Shape& xs = shapes_.at(op.inputs[0]);
    const Shape& ys = shapes_.at(op.output);
    std::vector<float>* x = &s->Buffer(op.inputs[0]);
    std::optional<Activation> act = FusableActivation(program, i, readers, manifest);
    std::string out_name = op.output;
    if (act) {
      out_name = program[i + 1].output;  // Fused: write the activation's output.
      ++i;
    }
    dnnl::primitive_attr attr = Epilogue(act);
    std::unordered_map<int, memory> args;
    dnnl::primitive primitive;
    if (op.kind == OpKind::kDense) {
      int64_t k = xs.back(), n = ys.back();
      int64_t m = static_cast<int64_t>(x->size()) / k;
      memory::desc src({m, k}, kF32, Tag::ab), dst({m, n}, kF32, Tag::ab);
      layouts_.Plain(op.inputs[0], index);
      memory::desc user_w({k, n}, kF32, Tag::ba);  // PyTorch's [N, K], read as K x N.
      memory::desc any_w({k, n}, kF32, Tag::any);
      memory::desc b = op.bias.empty() ? memory::desc() : memory::desc({1, n}, kF32, Tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any_w, b, dst), attr, s->engine);
      primitive = dnnl::matmul(pd);
      args = {{DNNL_ARG_SRC, s->Wrap(src, op.inputs[0])},
              {DNNL_ARG_WEIGHTS, PackedWeights(pd.weights_desc(), user_w, op.weight)},
              {DNNL_ARG_DST, s->Wrap(dst, out_name)}};
      if (!op.bias.empty()) {
        args[DNNL_ARG_BIAS] = WeightMemory(b, op.bias);
      }
    } else {
      const Shape& ws = bundle.weights.index().Find(op.weight)->shape;  // OIHW.
      memory::dims strides{op.stride[0], op.stride[1]};
      memory::dims padding{op.padding[0], op.padding[1]};
      // Source, weights and destination in the layouts the fastest kernel wants (blocked
      // channels). The destination stays blocked for the readers that take it so (Output).
      memory::desc any_src(Dims(xs), kF32, Tag::any), any_dst(Dims(ys), kF32, Tag::any);
      // Grouped: [G, O/G, C/G, KH, KW], the same bytes as OIHW.
      memory::dims w_dims = Dims(ws);
      Tag w_tag = Tag::oihw;
      if (op.groups > 1) {
        w_dims = {op.groups, ws[0] / op.groups, ws[1], ws[2], ws[3]};
        w_tag = Tag::goihw;
      }
      memory::desc user_w(w_dims, kF32, w_tag);
      memory::desc any_w(w_dims, kF32, Tag::any);
      memory::desc b = op.bias.empty() ? memory::desc() : memory::desc({ws[0]}, kF32, Tag::x);
      dnnl::convolution_forward::primitive_desc pd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::convolution_direct, any_src, any_w, b,
                                          any_dst, strides, padding, padding),
          attr, s->engine);
      primitive = dnnl::convolution_forward(pd);
      args = {{DNNL_ARG_SRC, layouts_.InLayout(op.inputs[0], pd.src_desc(), index)},
              {DNNL_ARG_WEIGHTS, PackedWeights(pd.weights_desc(), user_w, op.weight)},
              {DNNL_ARG_DST, layouts_.Output(out_name, pd.dst_desc())}};
      if (!op.bias.empty()) {
        args[DNNL_ARG_BIAS] = WeightMemory(b, op.bias);
      }
    }
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
    return i;
  }

  // An add of two equal-shaped tensors, one of them blocked: oneDNN's binary add in that
  // layout (the residual add between convolutions), with the next activation fused when it
  // keeps the padding zero.
  size_t AddBlockedSum(size_t i, const memory::desc& layout) {
    const Op& op = manifest_.program[i];
    std::optional<Activation> act = FusableActivation(manifest_.program, i, readers_, manifest_);
    std::string out_name = op.output;
    if (act && KeepsZero(manifest_.program[i + 1])) {
      out_name = manifest_.program[i + 1].output;
    } else {
      act.reset();
    }
    memory a = layouts_.InLayout(op.inputs[0], layout, i),
           b = layouts_.InLayout(op.inputs[1], layout, i);
    dnnl::binary::primitive_desc pd(
        dnnl::binary::desc(dnnl::algorithm::binary_add, layout, layout, layout), Epilogue(act),
        s->engine);
    dnnl::binary primitive(pd);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC_0, a},
                                            {DNNL_ARG_SRC_1, b},
                                            {DNNL_ARG_DST, layouts_.Output(out_name, layout)}};
    s->steps.push_back({i, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
    return act ? i + 1 : i;
  }

  // An activation as oneDNN's eltwise in `layout` (the input's, blocked or plain).
  // REQUIRES: AsActivation(op) has a value.
  void AddActivation(size_t index, const Op& op, const memory::desc& layout) {
    Activation act = *AsActivation(op);
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, act.algorithm, layout,
                                    act.alpha, act.beta),
        s->engine);
    dnnl::eltwise_forward primitive(pd);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, layouts_.InLayout(op.inputs[0], layout, index)},
        {DNNL_ARG_DST, layouts_.Output(op.output, layout)}};
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // maxpool2d, avgpool2d and global_avgpool: oneDNN's pooling in the input's layout (parallel
  // over the batch and channels; max pooling ignores padding, as ONNX's does).
  void AddPool(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    bool global = op.kind == OpKind::kGlobalAvgPool;
    memory::desc src = layouts_.Layout(op.inputs[0]);
    memory::dims kernel{op.kernel[0], op.kernel[1]}, strides{op.stride[0], op.stride[1]};
    memory::dims padding{op.padding[0], op.padding[1]};
    Shape ys = shapes_.at(op.output);
    if (global) {
      kernel = {xs[2], xs[3]};
      strides = {1, 1};
      padding = {0, 0};
      ys = {xs[0], xs[1], 1, 1};
    }
    // Global: [N, C, 1, 1] in NCHW or NHWC is the [N, C] output's bytes; the one matching the
    // source's layout has a vectorised kernel (a mismatch falls back to oneDNN's reference).
    Tag dst_tag = Tag::any;
    if (global) {
      dst_tag = src == memory::desc(Dims(xs), kF32, Tag::nhwc) ? Tag::nhwc : Tag::nchw;
    }
    memory::desc dst(Dims(ys), kF32, dst_tag);
    dnnl::pooling_forward::primitive_desc pd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, PoolAlgorithm(op), src, dst,
                                    strides, kernel, padding, RightPadding(op, xs, ys, padding)),
        s->engine);
    dnnl::pooling_forward primitive(pd);
    memory y =
        global ? s->Wrap(pd.dst_desc(), op.output) : layouts_.Output(op.output, pd.dst_desc());
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, layouts_.InLayout(op.inputs[0], src, index)}, {DNNL_ARG_DST, y}};
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // Elementwise add, sub, mul or div, with numpy broadcasting (or a plain add of equal shapes).
  void AddBroadcast(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    const Shape& ys = shapes_.at(op.output);
    std::vector<float>* x = layouts_.Plain(op.inputs[0], index);
    std::vector<float>* y = &s->Buffer(op.output);
    const std::map<std::string, Shape>& shapes = shapes_;
    const Bundle& bundle = bundle_;
    if (op.kind == OpKind::kAdd && op.inputs.size() == 2 && shapes.at(op.inputs[1]) == xs) {
      std::vector<float>* x2 = layouts_.Plain(op.inputs[1], index);
      s->steps.push_back({index, [x, x2, y] { cpu::Add(*x, *x2, *y); }});
      return;
    }
    bool weighted = op.inputs.size() == 1;
    std::span<const float> w = weighted ? Weight(op.weight) : std::span<const float>();
    const std::vector<float>* x2 = weighted ? nullptr : layouts_.Plain(op.inputs[1], index);
    Shape bs = weighted ? bundle.weights.index().Find(op.weight)->shape : shapes.at(op.inputs[1]);
    s->steps.push_back({index, [kind = op.kind, reverse = op.reverse, x, xs, w, x2, bs, ys, y] {
                          std::span<const float> b = x2 != nullptr ? *x2 : w;
                          if (reverse) {
                            Broadcast(kind, b, bs, *x, xs, ys, *y);
                          } else {
                            Broadcast(kind, *x, xs, b, bs, ys, *y);
                          }
                        }});
  }

  // oneDNN's batched matmul (the leading axes are batch axes of both operands), with the
  // elementwise ops that follow it fused as binary post-ops (attention's scale and mask).
  size_t AddMatMul(size_t i) {
    const Op& op = manifest_.program[i];
    const Shape& ys = shapes_.at(op.output);
    layouts_.Plain(op.inputs[0], i);
    layouts_.Plain(op.inputs[1], i);
    memory::desc a = PlainDesc(shapes_.at(op.inputs[0]));
    memory::desc b = PlainDesc(shapes_.at(op.inputs[1]));
    BinaryChain chain = FuseBinaries(i, ys);
    dnnl::primitive_attr attr;
    attr.set_post_ops(chain.ops);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, PlainDesc(ys)), attr, s->engine);
    dnnl::matmul primitive(pd);
    std::unordered_map<int, memory> args = chain.args;
    args[DNNL_ARG_SRC] = s->Wrap(a, op.inputs[0]);
    args[DNNL_ARG_WEIGHTS] = s->Wrap(b, op.inputs[1]);
    args[DNNL_ARG_DST] = s->Wrap(PlainDesc(ys), chain.output);
    s->steps.push_back({i, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
    return chain.last;
  }

  // Binary ops after program[i] that a primitive can apply as post-ops: each reads the value
  // so far as its left operand (either operand for add and mul), which no other op or output
  // reads, and the other operand broadcasts to `ys`.
  struct BinaryChain {
    dnnl::post_ops ops;
    std::unordered_map<int, memory> args;  // The post-ops' second operands.
    std::string output;                    // The last fused op's output.
    size_t last;                           // Its index.
  };
  BinaryChain FuseBinaries(size_t i, const Shape& ys) {
    const std::vector<Op>& program = manifest_.program;
    BinaryChain chain{dnnl::post_ops(), {}, program[i].output, i};
    constexpr int kMaxFused = 4;
    for (int n = 0; n < kMaxFused && chain.last + 1 < program.size(); ++n) {
      const Op& next = program[chain.last + 1];
      if (readers_[chain.output] != 1 || IsOutput(chain.output) ||
          !IsBinaryElementwise(next.kind) || shapes_.at(next.output) != ys) {
        break;
      }
      std::optional<memory> other = RightOperand(next, chain.output, chain.last + 1);
      if (!other) {
        break;
      }
      int index = chain.ops.len();
      chain.ops.append_binary(BinaryAlgorithm(next.kind), other->get_desc());
      chain.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1] = *other;
      chain.output = next.output;
      chain.last += 1;
    }
    return chain;
  }

  // The operand of binary op `op` other than `left`, as a plain memory of the output's rank
  // (leading 1s added), when `left` may be its left operand and the other broadcasts to the
  // output; nullopt otherwise.
  std::optional<memory> RightOperand(const Op& op, const std::string& left, size_t index) {
    bool commutes = op.kind == OpKind::kAdd || op.kind == OpKind::kMul;
    const Shape& ys = shapes_.at(op.output);
    Shape other_shape;
    const float* data = nullptr;
    if (op.inputs.size() == 1) {
      if (op.inputs[0] != left || (op.reverse && !commutes)) {
        return std::nullopt;
      }
      other_shape = bundle_.weights.index().Find(op.weight)->shape;
      data = Weight(op.weight).data();
    } else {
      bool first = op.inputs[0] == left;
      if (!first && (op.inputs[1] != left || !commutes)) {
        return std::nullopt;
      }
      const std::string& other = op.inputs[first ? 1 : 0];
      other_shape = shapes_.at(other);
      data = layouts_.Plain(other, index)->data();
    }
    if (other_shape.size() > ys.size()) {
      return std::nullopt;
    }
    Shape padded(ys.size() - other_shape.size(), 1);
    padded.insert(padded.end(), other_shape.begin(), other_shape.end());
    for (size_t d = 0; d < ys.size(); ++d) {
      if (padded[d] != ys[d] && padded[d] != 1) {
        return std::nullopt;
      }
    }
    return memory(PlainDesc(padded), s->engine, const_cast<float*>(data));
  }

  static dnnl::algorithm BinaryAlgorithm(OpKind kind) {
    switch (kind) {
      case OpKind::kSub:
        return dnnl::algorithm::binary_sub;
      case OpKind::kMul:
        return dnnl::algorithm::binary_mul;
      case OpKind::kDiv:
        return dnnl::algorithm::binary_div;
      default:
        return dnnl::algorithm::binary_add;
    }
  }

  bool IsOutput(const std::string& name) const {
    for (const TensorSpec& out : manifest_.outputs) {
      if (out.name == name) {
        return true;
      }
    }
    return false;
  }

  // oneDNN's layer normalization over the last axis, scale and shift the op's weight and bias.
  void AddLayerNorm(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    memory::desc data = PlainDesc(xs), vector({xs.back()}, kF32, Tag::x);
    layouts_.Plain(op.inputs[0], index);
    dnnl::layer_normalization_forward::primitive_desc pd(
        dnnl::layer_normalization_forward::desc(
            dnnl::prop_kind::forward_inference, data, static_cast<float>(op.eps),
            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift),
        s->engine);
    dnnl::layer_normalization_forward primitive(pd);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, s->Wrap(data, op.inputs[0])},
                                            {DNNL_ARG_SCALE, WeightMemory(vector, op.weight)},
                                            {DNNL_ARG_SHIFT, WeightMemory(vector, op.bias)},
                                            {DNNL_ARG_DST, s->Wrap(data, op.output)}};
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // A transpose as a oneDNN reorder: the input read through permuted strides.
  void AddTranspose(size_t index, const Op& op) {
    const Shape& ys = shapes_.at(op.output);
    const Shape& xs = shapes_.at(op.inputs[0]);
    memory::dims strides = RowMajorStrides(xs), permuted(xs.size());
    for (size_t d = 0; d < op.perm.size(); ++d) {
      permuted[d] = strides[static_cast<size_t>(op.perm[d])];
    }
    layouts_.Plain(op.inputs[0], index);
    memory from(memory::desc(Dims(ys), kF32, permuted), s->engine, s->Buffer(op.inputs[0]).data());
    layouts_.AddReorder(index, from, s->Wrap(PlainDesc(ys), op.output));
  }

  // oneDNN's softmax (vectorised exp); the reference loop runs in double.
  void AddSoftmax(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    memory::desc data = PlainDesc(xs);
    layouts_.Plain(op.inputs[0], index);
    int axis = static_cast<int>(op.axis < 0 ? op.axis + static_cast<int64_t>(xs.size()) : op.axis);
    dnnl::primitive primitive;
    if (op.kind == OpKind::kLogSoftmax) {
      primitive = dnnl::logsoftmax_forward(dnnl::logsoftmax_forward::primitive_desc(
          dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_inference, data, axis),
          s->engine));
    } else {
      primitive = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, data, axis), s->engine));
    }
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, s->Wrap(data, op.inputs[0])},
                                            {DNNL_ARG_DST, s->Wrap(data, op.output)}};
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // oneDNN's concat of plain tensors along the op's axis.
  void AddConcat(size_t index, const Op& op) {
    std::vector<memory::desc> parts;
    std::unordered_map<int, memory> args;
    for (size_t p = 0; p < op.inputs.size(); ++p) {
      layouts_.Plain(op.inputs[p], index);
      parts.push_back(PlainDesc(shapes_.at(op.inputs[p])));
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(p)] = s->Wrap(parts.back(), op.inputs[p]);
    }
    const Shape& ys = shapes_.at(op.output);
    int axis = static_cast<int>(op.axis < 0 ? op.axis + static_cast<int64_t>(ys.size()) : op.axis);
    dnnl::concat::primitive_desc pd(PlainDesc(ys), axis, parts, s->engine);
    dnnl::concat primitive(pd);
    args[DNNL_ARG_DST] = s->Wrap(PlainDesc(ys), op.output);
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // The padding after each spatial axis: as before it, or in ceil mode whatever the last
  // window reaches past the input (oneDNN takes the output size from the padding).
  static memory::dims RightPadding(const Op& op, const Shape& xs, const Shape& ys,
                                   const memory::dims& left) {
    if (!op.ceil) {
      return left;
    }
    memory::dims right(2);
    for (size_t i = 0; i < 2; ++i) {
      right[i] = (ys[2 + i] - 1) * op.stride[i] + op.kernel[i] - xs[2 + i] - left[i];
    }
    return right;
  }

  static dnnl::algorithm PoolAlgorithm(const Op& op) {
    if (op.kind == OpKind::kMaxPool2d) {
      return dnnl::algorithm::pooling_max;
    }
    return op.kind == OpKind::kAvgPool2d && op.count_pad
               ? dnnl::algorithm::pooling_avg_include_padding
               : dnnl::algorithm::pooling_avg_exclude_padding;
  }

  // The ops ferry's own loops run (loop_steps.h).
  void AddLoop(size_t index, const Op& op) {
    LoopOperands operands{layouts_.Plain(op.inputs[0], index),
                          shapes_.at(op.inputs[0]),
                          &s->Buffer(op.output),
                          shapes_.at(op.output),
                          Weight(op.weight),
                          Weight(op.bias)};
    std::function<Status()> loop = LoopStep(op, operands);
    s->steps.push_back({index, [s = s, loop] {
                          if (Status done = loop(); !done.ok()) {
                            s->failure = done.error();
                          }
                        }});
  }

  const Bundle& bundle_;
  const Manifest& manifest_;
  const std::map<std::string, Shape>& shapes_;
  const WeightMap& weights_;
  ProgramState* s;
  std::map<std::string, int> readers_;  // Tensor name -> ops reading it.
  Layouts layouts_;
};

Result<std::unique_ptr<FastProgram>> FastProgram::Build(const Bundle& bundle,
                                                        const std::map<std::string, Shape>& shapes,
                                                        const WeightMap& weights) {
  const Manifest& manifest = bundle.manifest;
  auto state = std::make_unique<ProgramState>();
  ProgramState* s = state.get();
  for (const auto& [name, shape] : shapes) {
    std::optional<int64_t> count = NumElements(shape);
    if (!count) {
      return InvalidArgument("tensor '" + name + "': element count overflows");
    }
    s->buffer_of[name] = s->buffers.size();
    s->buffers.emplace_back(static_cast<size_t>(*count));
  }
  for (const TensorSpec& in : manifest.inputs) {
    s->inputs.push_back(s->buffer_of.at(in.name));
  }
  for (const TensorSpec& out : manifest.outputs) {
    s->outputs.push_back(s->buffer_of.at(out.name));
  }
  Compiler compiler(bundle, shapes, weights, s);
  for (size_t i = 0; i < manifest.program.size(); ++i) {
    try {
      i = compiler.Add(i);
    } catch (const dnnl::error& e) {
      return Internal("model '" + manifest.name + "': op " + std::to_string(i) + " (" +
                      std::string(OpKindName(manifest.program[i].kind)) + "): oneDNN: " + e.what());
    }
  }
  try {
    compiler.Finish();
  } catch (const dnnl::error& e) {
    return Internal("model '" + manifest.name + "': output reorder: oneDNN: " + e.what());
  }
  return std::unique_ptr<FastProgram>(new FastProgram(std::move(state)));
}

Status FastProgram::Run() {
  state_->failure.reset();
  for (const ProgramState::Step& step : state_->steps) {
    try {
      step.run();
      if (state_->failure) {
        state_->stream.wait();
        return InvalidArgument("op " + std::to_string(step.op_index) + ": " +
                               state_->failure->message);
      }
    } catch (const dnnl::error& e) {
      return Internal("op " + std::to_string(step.op_index) + ": oneDNN: " + e.what());
    }
  }
  state_->stream.wait();
  return OkStatus();
}

}  // namespace ferry::cpu
