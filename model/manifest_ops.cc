// A manifest's [[program]] ops: the op names, and reading one op's kind, tensors and
// attributes (manifest_reading.h).
#include <algorithm>
#include <limits>

#include "model/manifest_reading.h"

namespace ferry {
namespace {

using manifest_reading::kMaxDim;
using manifest_reading::kMaxRank;
using manifest_reading::ValidName;

struct OpInfo {
  std::string_view name;
  OpKind kind;
};

constexpr OpInfo kOps[] = {
    {"dense", OpKind::kDense},
    {"relu", OpKind::kRelu},
    {"gelu", OpKind::kGelu},
    {"tanh", OpKind::kTanh},
    {"sigmoid", OpKind::kSigmoid},
    {"softmax", OpKind::kSoftmax},
    {"layernorm", OpKind::kLayerNorm},
    {"add", OpKind::kAdd},
    {"conv2d", OpKind::kConv2d},
    {"maxpool2d", OpKind::kMaxPool2d},
    {"global_avgpool", OpKind::kGlobalAvgPool},
    {"flatten", OpKind::kFlatten},
    {"reshape", OpKind::kReshape},
    {"clip", OpKind::kClip},
    {"gather", OpKind::kGather},
    {"reduce_mean", OpKind::kReduceMean},
    {"sub", OpKind::kSub},
    {"mul", OpKind::kMul},
    {"div", OpKind::kDiv},
    {"transpose", OpKind::kTranspose},
    {"matmul", OpKind::kMatMul},
    {"slice", OpKind::kSlice},
    {"sqrt", OpKind::kSqrt},
    {"exp", OpKind::kExp},
    {"log", OpKind::kLog},
    {"leaky_relu", OpKind::kLeakyRelu},
    {"hard_sigmoid", OpKind::kHardSigmoid},
    {"hard_swish", OpKind::kHardSwish},
    {"avgpool2d", OpKind::kAvgPool2d},
    {"reduce_sum", OpKind::kReduceSum},
    {"reduce_max", OpKind::kReduceMax},
    {"log_softmax", OpKind::kLogSoftmax},
    {"concat", OpKind::kConcat},
    {"arg_max", OpKind::kArgMax},
};

void ReadPair(TableReader& r, std::string_view key, std::array<int64_t, 2>* out, int64_t min) {
  const toml::node* node = r.Raw(key);
  if (node == nullptr) {
    return;
  }
  if (node->is_integer()) {
    int64_t v = 0;
    if (r.Int(key, &v, min, 1 << 16)) {
      *out = {v, v};
    }
    return;
  }
  std::vector<int64_t> values;
  if (!r.IntArray(key, &values, min, 1 << 16)) {
    return;
  }
  if (values.size() != 2) {
    r.ErrorAt(key, "expected one integer or [height, width]");
    return;
  }
  *out = {values[0], values[1]};
}

// The op's kind from its "op" key; an error naming the nearest known op when unknown.
std::optional<OpKind> ReadOpKind(TableReader& r) {
  std::string name;
  if (!r.String("op", &name)) {
    r.ErrorAt("op", "missing op name");
    r.Finish();  // Its other keys are still checked; an unknown op's are not.
    return std::nullopt;
  }
  auto known = std::find_if(std::begin(kOps), std::end(kOps),
                            [&](const OpInfo& info) { return info.name == name; });
  if (known == std::end(kOps)) {
    std::vector<std::string> names;
    for (const OpInfo& info : kOps) {
      names.emplace_back(info.name);
    }
    std::string hint = NearestKey(name, names);
    r.ErrorAt("op",
              "unknown op '" + name + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    return std::nullopt;
  }
  return known->kind;
}

// The op's input and output tensor names (two inputs, or one and a weight, for a binary op).
bool ReadOpTensors(TableReader& r, Op& op) {
  bool ok = true;
  bool binary = IsBinaryElementwise(op.kind);
  if (op.kind == OpKind::kConcat) {
    if (!r.StringArray("inputs", &op.inputs) || op.inputs.size() < 2 ||
        op.inputs.size() > kMaxConcatInputs) {
      r.ErrorAt("inputs", "concat needs inputs = [\"a\", \"b\", ...], 2 to " +
                              std::to_string(kMaxConcatInputs) + " of them");
      ok = false;
    }
  } else if (op.kind == OpKind::kMatMul || (binary && r.Raw("inputs") != nullptr)) {
    if (!r.StringArray("inputs", &op.inputs) || op.inputs.size() != 2) {
      r.ErrorAt("inputs", std::string(OpKindName(op.kind)) + " needs inputs = [\"a\", \"b\"]");
      ok = false;
    }
  } else if (binary) {
    op.inputs.resize(1);
    if (!r.String("input", &op.inputs[0]) || !r.String("weight", &op.weight) || op.weight.empty()) {
      r.ErrorAt("inputs", std::string(OpKindName(op.kind)) +
                              " needs inputs = [\"a\", \"b\"], or input and a weight");
      ok = false;
    }
    r.Bool("reverse", &op.reverse);
  } else {
    op.inputs.resize(1);
    if (!r.String("input", &op.inputs[0])) {
      r.ErrorAt("input", "missing input tensor name");
      ok = false;
    }
  }
  if (!r.String("output", &op.output) || !ValidName(op.output)) {
    r.ErrorAt("output", "missing or invalid output tensor name");
    ok = false;
  }
  return ok;
}

// The attributes `op.kind` takes (weights, axes, windows, ranges), each checked.
bool ReadOpAttributes(TableReader& r, Op& op) {
  bool ok = true;
  switch (op.kind) {
    case OpKind::kDense:
    case OpKind::kConv2d:
      if (!r.String("weight", &op.weight) || op.weight.empty()) {
        r.ErrorAt("weight", "missing weight tensor name");
        ok = false;
      }
      if (r.String("bias", &op.bias) && op.bias.empty()) {
        r.ErrorAt("bias", "must name a weight tensor (leave bias out for none)");
        ok = false;
      }
      if (op.kind == OpKind::kConv2d) {
        ReadPair(r, "stride", &op.stride, 1);
        ReadPair(r, "padding", &op.padding, 0);
        r.Int("groups", &op.groups, 1, kMaxDim);
      }
      break;
    case OpKind::kLayerNorm:
      if (!r.String("weight", &op.weight) || !r.String("bias", &op.bias) || op.weight.empty() ||
          op.bias.empty()) {
        r.ErrorAt("weight", "layernorm needs weight and bias tensor names");
        ok = false;
      }
      r.Double("eps", &op.eps, {0.0, 1.0, true, true});
      break;
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
      r.Int("axis", &op.axis, -static_cast<int64_t>(kMaxRank), kMaxRank - 1);
      break;
    case OpKind::kReduceMean:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kConcat:
    case OpKind::kArgMax:
      r.Bool("last_index", &op.last_index);
      if (op.kind != OpKind::kArgMax && op.last_index) {
        r.ErrorAt("last_index", "only arg_max takes last_index");
        ok = false;
      }
      if (!r.Int("axis", &op.axis, -static_cast<int64_t>(kMaxRank), kMaxRank - 1)) {
        r.ErrorAt("axis", std::string(OpKindName(op.kind)) + " needs the axis it works along");
        ok = false;
      }
      break;
    case OpKind::kLeakyRelu:
    case OpKind::kHardSigmoid: {
      const double kLimit = std::numeric_limits<float>::max();  // Finite in FP32.
      bool has_alpha = r.Double("alpha", &op.alpha, {-kLimit, kLimit, false, false});
      bool has_beta = r.Double("beta", &op.beta, {-kLimit, kLimit, false, false});
      if (!has_alpha || (op.kind == OpKind::kHardSigmoid && !has_beta)) {
        r.ErrorAt("alpha", std::string(OpKindName(op.kind)) +
                               (op.kind == OpKind::kLeakyRelu ? " needs alpha (finite)"
                                                              : " needs alpha and beta (finite)"));
        ok = false;
      }
      break;
    }
    case OpKind::kSlice:
      if (!r.Int("axis", &op.axis, -static_cast<int64_t>(kMaxRank), kMaxRank - 1) ||
          !r.Int("start", &op.start, 0, kMaxDim - 1) || !r.Int("end", &op.end, 1, kMaxDim)) {
        r.ErrorAt("axis", "slice needs axis, start and end (0 <= start < end)");
        ok = false;
      }
      break;
    case OpKind::kTranspose:
      if (!r.IntArray("perm", &op.perm, 0, kMaxRank - 1) || op.perm.empty()) {
        r.ErrorAt("perm", "transpose needs perm = [0, ...], a permutation of the axes");
        ok = false;
      }
      break;
    case OpKind::kGather:
      if (!r.String("weight", &op.weight) || op.weight.empty()) {
        r.ErrorAt("weight", "gather needs the table's weight tensor name");
        ok = false;
      }
      break;
    case OpKind::kClip: {
      const double kLimit = std::numeric_limits<float>::max();  // Finite in FP32.
      bool has_min = r.Double("min", &op.min, {-kLimit, kLimit, false, false});
      bool has_max = r.Double("max", &op.max, {-kLimit, kLimit, false, false});
      if (!has_min || !has_max || op.min > op.max) {
        r.ErrorAt("max", "clip needs min <= max, both finite");
        ok = false;
      }
      break;
    }
    case OpKind::kMaxPool2d:
    case OpKind::kAvgPool2d: {
      ReadPair(r, "kernel", &op.kernel, 1);
      if (op.kernel[0] == 0) {
        r.ErrorAt("kernel", std::string(OpKindName(op.kind)) + " needs kernel");
        ok = false;
      }
      if (op.kind == OpKind::kAvgPool2d) {
        r.Bool("count_pad", &op.count_pad);
      } else {
        r.Bool("ceil", &op.ceil);
      }
      op.stride = op.kernel;
      ReadPair(r, "stride", &op.stride, 1);
      ReadPair(r, "padding", &op.padding, 0);
      if (op.padding[0] * 2 > op.kernel[0] || op.padding[1] * 2 > op.kernel[1]) {
        r.ErrorAt("padding", "must be at most half the kernel");
        ok = false;
      }
      break;
    }
    case OpKind::kReshape:
      if (!r.IntArray("shape", &op.shape, 1, kMaxDim) || op.shape.empty() ||
          op.shape.size() >= kMaxRank) {
        r.ErrorAt("shape",
                  "reshape needs shape = [dims after the batch axis], each positive, at "
                  "most " +
                      std::to_string(kMaxRank - 1) + " of them");
        ok = false;
      }
      break;
    default:
      break;
  }
  return ok;
}

}  // namespace

std::optional<Op> manifest_reading::ReadOp(TableReader& r) {
  std::optional<OpKind> kind = ReadOpKind(r);
  if (!kind) {
    return std::nullopt;
  }
  Op op;
  op.kind = *kind;
  bool tensors = ReadOpTensors(r, op);
  bool attributes = ReadOpAttributes(r, op);
  r.Finish();
  return tensors && attributes ? std::optional<Op>(op) : std::nullopt;
}

bool IsBinaryElementwise(OpKind kind) {
  return kind == OpKind::kAdd || kind == OpKind::kSub || kind == OpKind::kMul ||
         kind == OpKind::kDiv;
}

std::string_view OpKindName(OpKind kind) {
  for (const OpInfo& info : kOps) {
    if (info.kind == kind) {
      return info.name;
    }
  }
  return "?";
}

}  // namespace ferry
