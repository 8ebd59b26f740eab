#include "worker/backends/cpu/fast_program.h"

#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "model/shape_inference.h"
#include "worker/backends/cpu/ops.h"
#include "worker/backends/cpu/tensor_ops.h"

namespace ferry::cpu {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

struct FastProgram::State {
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

namespace {

// The activation op at program[i + 1] that may be fused into program[i]'s epilogue.
// An eltwise post-op: the algorithm and its alpha and beta (clip's range).
struct Activation {
  dnnl::algorithm algorithm;
  float alpha = 0.f;
  float beta = 0.f;
};

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
  const Op& next = program[i + 1];
  switch (next.kind) {
    case OpKind::kRelu:
      return Activation{dnnl::algorithm::eltwise_relu};
    case OpKind::kGelu:
      return Activation{dnnl::algorithm::eltwise_gelu_erf};  // Exact GELU, as the reference.
    case OpKind::kTanh:
      return Activation{dnnl::algorithm::eltwise_tanh};
    case OpKind::kSigmoid:
      return Activation{dnnl::algorithm::eltwise_logistic};
    case OpKind::kClip:
      return Activation{dnnl::algorithm::eltwise_clip, static_cast<float>(next.min),
                        static_cast<float>(next.max)};
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

memory::dims Dims(const Shape& shape) { return memory::dims(shape.begin(), shape.end()); }

}  // namespace

FastProgram::FastProgram(std::unique_ptr<State> state) : state_(std::move(state)) {}
FastProgram::~FastProgram() = default;

std::span<float> FastProgram::Input(size_t i) { return state_->buffers[state_->inputs[i]]; }
std::span<const float> FastProgram::Output(size_t o) const {
  return state_->buffers[state_->outputs[o]];
}

// Turns a manifest's ops into State's steps: oneDNN primitives for dense, conv2d, matmul and
// softmax (with weights reordered once into the layout each prefers), ferry's loops for the rest.
class FastProgram::Compiler {
 public:
  Compiler(const Bundle& bundle, const std::map<std::string, Shape>& shapes,
           const WeightMap& weights, State* s)
      : bundle_(bundle), manifest_(bundle.manifest), shapes_(shapes), weights_(weights), s(s) {
    for (const Op& op : manifest_.program) {
      for (const std::string& in : op.inputs) {
        ++readers_[in];
      }
    }
  }

  // Adds program[i]'s steps; returns the index of the last op they cover (i, or i + 1 when an
  // activation was fused). oneDNN's errors are thrown as dnnl::error.
  size_t Add(size_t i) {
    const Op& op = manifest_.program[i];
    switch (op.kind) {
      case OpKind::kDense:
      case OpKind::kConv2d:
        return AddDenseOrConv(i);
      case OpKind::kAdd:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv:
        AddBroadcast(i, op);
        return i;
      case OpKind::kMatMul:
        AddMatMul(i, op);
        return i;
      case OpKind::kSoftmax:
        AddSoftmax(i, op);
        return i;
      default:
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
      // Source, weights and destination in the layouts the fastest kernel wants
      // (blocked channels); the plain NCHW tensors are reordered in and out around it.
      memory::desc src(Dims(xs), kF32, Tag::nchw), dst(Dims(ys), kF32, Tag::nchw);
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
      memory plain_src = s->Wrap(src, op.inputs[0]), plain_dst = s->Wrap(dst, out_name);
      memory conv_src = plain_src, conv_dst = plain_dst;
      if (pd.src_desc() != src) {
        conv_src = memory(pd.src_desc(), s->engine);
        dnnl::reorder in(plain_src, conv_src);
        s->steps.push_back({index, [s = s, in, plain_src, conv_src]() mutable {
                              in.execute(s->stream, plain_src, conv_src);
                            }});
      }
      if (pd.dst_desc() != dst) {
        conv_dst = memory(pd.dst_desc(), s->engine);
      }
      args = {{DNNL_ARG_SRC, conv_src},
              {DNNL_ARG_WEIGHTS, PackedWeights(pd.weights_desc(), user_w, op.weight)},
              {DNNL_ARG_DST, conv_dst}};
      if (!op.bias.empty()) {
        args[DNNL_ARG_BIAS] = WeightMemory(b, op.bias);
      }
      if (conv_dst != plain_dst) {
        dnnl::reorder out(conv_dst, plain_dst);
        s->steps.push_back({index, [s = s, primitive, args, out, conv_dst, plain_dst]() mutable {
                              primitive.execute(s->stream, args);
                              out.execute(s->stream, conv_dst, plain_dst);
                            }});
        return i;
      }
    }
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
    return i;
  }

  // Elementwise add, sub, mul or div, with numpy broadcasting (or a plain add of equal shapes).
  void AddBroadcast(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    const Shape& ys = shapes_.at(op.output);
    std::vector<float>* x = &s->Buffer(op.inputs[0]);
    std::vector<float>* y = &s->Buffer(op.output);
    const std::map<std::string, Shape>& shapes = shapes_;
    const Bundle& bundle = bundle_;
    if (op.kind == OpKind::kAdd && op.inputs.size() == 2 && shapes.at(op.inputs[1]) == xs) {
      std::vector<float>* x2 = &s->Buffer(op.inputs[1]);
      s->steps.push_back({index, [x, x2, y] { cpu::Add(*x, *x2, *y); }});
      return;
    }
    bool weighted = op.inputs.size() == 1;
    std::span<const float> w = weighted ? Weight(op.weight) : std::span<const float>();
    const std::vector<float>* x2 = weighted ? nullptr : &s->Buffer(op.inputs[1]);
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

  // oneDNN's batched matmul over the flattened leading axes.
  void AddMatMul(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    const Shape& ys = shapes_.at(op.output);
    std::vector<float>* x = &s->Buffer(op.inputs[0]);
    int64_t m = xs[xs.size() - 2], k = xs.back(), n = ys.back();
    int64_t batches = static_cast<int64_t>(x->size()) / (m * k);
    memory::desc a({batches, m, k}, kF32, Tag::abc), b({batches, k, n}, kF32, Tag::abc);
    memory::desc c({batches, m, n}, kF32, Tag::abc);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), s->engine);
    dnnl::matmul primitive(pd);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, s->Wrap(a, op.inputs[0])},
                                            {DNNL_ARG_WEIGHTS, s->Wrap(b, op.inputs[1])},
                                            {DNNL_ARG_DST, s->Wrap(c, op.output)}};
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // oneDNN's softmax (vectorised exp); the reference loop runs in double.
  void AddSoftmax(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    memory::dims strides(xs.size(), 1);
    for (size_t d = xs.size() - 1; d-- > 0;) {
      strides[d] = strides[d + 1] * xs[d + 1];
    }
    memory::desc data(Dims(xs), kF32, strides);
    int axis = static_cast<int>(op.axis < 0 ? op.axis + static_cast<int64_t>(xs.size()) : op.axis);
    dnnl::softmax_forward::primitive_desc pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, data, axis), s->engine);
    dnnl::softmax_forward primitive(pd);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, s->Wrap(data, op.inputs[0])},
                                            {DNNL_ARG_DST, s->Wrap(data, op.output)}};
    s->steps.push_back({index, [s = s, primitive, args] { primitive.execute(s->stream, args); }});
  }

  // The ops ferry's own loops run.
  void AddLoop(size_t index, const Op& op) {
    const Shape& xs = shapes_.at(op.inputs[0]);
    const Shape& ys = shapes_.at(op.output);
    std::vector<float>* x = &s->Buffer(op.inputs[0]);
    std::vector<float>* y = &s->Buffer(op.output);
    switch (op.kind) {
      case OpKind::kRelu:
        s->steps.push_back({index, [x, y] { Relu(*x, *y); }});
        break;
      case OpKind::kGelu:
        s->steps.push_back({index, [x, y] { Gelu(*x, *y); }});
        break;
      case OpKind::kTanh:
        s->steps.push_back({index, [x, y] { Tanh(*x, *y); }});
        break;
      case OpKind::kSigmoid:
        s->steps.push_back({index, [x, y] { Sigmoid(*x, *y); }});
        break;
      case OpKind::kClip: {
        auto lo = static_cast<float>(op.min), hi = static_cast<float>(op.max);
        s->steps.push_back({index, [x, lo, hi, y] { Clip(*x, lo, hi, *y); }});
        break;
      }
      case OpKind::kTranspose:
        s->steps.push_back({index, [x, xs, perm = op.perm, y] { Transpose(*x, xs, perm, *y); }});
        break;
      case OpKind::kSlice: {
        int64_t axis = op.axis < 0 ? op.axis + static_cast<int64_t>(xs.size()) : op.axis;
        s->steps.push_back({index, [x, xs, axis, start = op.start, end = op.end, y] {
                              Slice(*x, xs, axis, start, end, *y);
                            }});
        break;
      }
      case OpKind::kSqrt:
      case OpKind::kExp:
      case OpKind::kLog:
        s->steps.push_back({index, [kind = op.kind, x, y] { Elementwise(kind, *x, *y); }});
        break;
      case OpKind::kLayerNorm: {
        std::span<const float> w = Weight(op.weight), b = Weight(op.bias);
        s->steps.push_back({index, [x, d = xs.back(), w, b, eps = op.eps, y] {
                              LayerNorm(*x, d, w, b, eps, *y);
                            }});
        break;
      }
      case OpKind::kMaxPool2d: {
        Window window{op.kernel, op.stride, op.padding};
        s->steps.push_back({index, [x, xs, window, ys, y] { MaxPool2d(*x, xs, window, ys, *y); }});
        break;
      }
      case OpKind::kGlobalAvgPool:
        s->steps.push_back({index, [x, xs, y] { GlobalAvgPool(*x, xs, *y); }});
        break;
      case OpKind::kGather: {
        std::span<const float> table = Weight(op.weight);
        int64_t width = ys.back();
        int64_t rows = static_cast<int64_t>(table.size()) / width;
        s->steps.push_back({index, [s = s, x, table, rows, width, y] {
                              if (Status g = Gather(*x, table, rows, width, *y); !g.ok()) {
                                s->failure = g.error();
                              }
                            }});
        break;
      }
      case OpKind::kReduceMean:
        s->steps.push_back({index, [x, xs, axis = op.axis, y] { ReduceMean(*x, xs, axis, *y); }});
        break;
      case OpKind::kFlatten:
      case OpKind::kReshape:
        s->steps.push_back({index, [x, y] { std::copy(x->begin(), x->end(), y->begin()); }});
        break;
      case OpKind::kDense:
      case OpKind::kConv2d:
      case OpKind::kAdd:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv:
      case OpKind::kMatMul:
      case OpKind::kSoftmax:
        break;  // Compiled by Add's other methods.
    }
  }

  const Bundle& bundle_;
  const Manifest& manifest_;
  const std::map<std::string, Shape>& shapes_;
  const WeightMap& weights_;
  State* s;
  std::map<std::string, int> readers_;  // Tensor name -> ops reading it.
};

Result<std::unique_ptr<FastProgram>> FastProgram::Build(const Bundle& bundle,
                                                        const std::map<std::string, Shape>& shapes,
                                                        const WeightMap& weights) {
  const Manifest& manifest = bundle.manifest;
  auto state = std::make_unique<State>();
  State* s = state.get();
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
  return std::unique_ptr<FastProgram>(new FastProgram(std::move(state)));
}

Status FastProgram::Run() {
  state_->failure.reset();
  for (const State::Step& step : state_->steps) {
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
