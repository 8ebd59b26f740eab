#include "model/onnx/converter.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <cctype>

#include "model/shape_inference.h"

namespace ferry::onnx_import {

std::string Sanitize(const std::string& name) {
  std::string out = name.substr(0, 100);
  for (char& ch : out) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.') {
      ch = '_';
    }
  }
  if (out.empty() || out == "." || out == "..") {
    out = "_" + out;
  }
  return out;
}

Attributes::Attributes(const onnx::NodeProto& node) {
  for (const onnx::AttributeProto& attr : node.attribute()) {
    by_name_.emplace(attr.name(), &attr);
  }
}

const onnx::AttributeProto* Attributes::Find(const std::string& name,
                                             onnx::AttributeProto::AttributeType type) {
  read_.insert(name);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return nullptr;
  }
  if (it->second->type() != type && !wrong_type_) {
    wrong_type_ = name;
  }
  return it->second->type() == type ? it->second : nullptr;
}

int64_t Attributes::Int(const std::string& name, int64_t fallback) {
  const onnx::AttributeProto* a = Find(name, onnx::AttributeProto::INT);
  return a != nullptr ? a->i() : fallback;
}

float Attributes::Float(const std::string& name, float fallback) {
  const onnx::AttributeProto* a = Find(name, onnx::AttributeProto::FLOAT);
  return a != nullptr ? a->f() : fallback;
}

std::string Attributes::String(const std::string& name, const std::string& fallback) {
  const onnx::AttributeProto* a = Find(name, onnx::AttributeProto::STRING);
  return a != nullptr ? a->s() : fallback;
}

std::vector<int64_t> Attributes::Ints(const std::string& name, std::vector<int64_t> fallback) {
  const onnx::AttributeProto* a = Find(name, onnx::AttributeProto::INTS);
  return a != nullptr ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : fallback;
}

const onnx::TensorProto* Attributes::Tensor(const std::string& name) {
  const onnx::AttributeProto* a = Find(name, onnx::AttributeProto::TENSOR);
  return a != nullptr ? &a->t() : nullptr;
}

std::optional<std::string> Attributes::Unread() const {
  for (const auto& [name, attr] : by_name_) {
    if (read_.count(name) == 0) {
      return name;
    }
  }
  return std::nullopt;
}

Converter::Converter(const OnnxModel& model, const ImportOptions& options)
    : model_(model), options_(options) {}

Error Converter::Fail(const std::string& message) const {
  std::string where = model_.source + ": ";
  if (node_ != nullptr) {
    where += "node '" + node_->name() + "' (" + node_->op_type() + ", opset " +
             std::to_string(model_.opset) + "): ";
  }
  return InvalidArgument(where + message);
}

const Value* Converter::Input(int i) const {
  if (i >= node_->input_size() || node_->input(i).empty()) {
    return nullptr;
  }
  auto it = values_.find(node_->input(i));
  return it == values_.end() ? nullptr : &it->second;
}

Result<const Value*> Converter::Tensor(int i) const {
  const Value* v = Input(i);
  if (v == nullptr || v->constant != nullptr) {
    return Fail("input " + std::to_string(i) +
                " must be a tensor computed from the model's inputs, not a constant or absent");
  }
  return v;
}

bool HasBatchSize(const ConstTensor& t) {
  return std::find(t.batch_size.begin(), t.batch_size.end(), true) != t.batch_size.end();
}

bool IsBatchSize(const ConstTensor& t, size_t i) {
  return i < t.batch_size.size() && t.batch_size[i];
}

void AppendInt(const ConstTensor& from, size_t i, ConstTensor* to) {
  bool batch = IsBatchSize(from, i);
  if (batch || !to->batch_size.empty()) {
    to->batch_size.resize(to->ints.size(), false);
    to->batch_size.push_back(batch);
  }
  to->ints.push_back(from.ints[i]);
}

Result<const ConstTensor*> Converter::Folded(int i) const {
  const Value* v = Input(i);
  if (v == nullptr || v->constant == nullptr) {
    return Fail("input " + std::to_string(i) +
                " must be a constant (an initializer, a Constant node or a shape computation)");
  }
  return v->constant;
}

Result<const ConstTensor*> Converter::Constant(int i) const {
  FERRY_ASSIGN_OR_RETURN(const ConstTensor* t, Folded(i));
  if (HasBatchSize(*t) || t->batch_broadcast) {
    return Fail("input " + std::to_string(i) +
                " depends on the batch size, which is known only at run time");
  }
  return t;
}

Status Converter::DefineConstant(int i, ConstTensor value) {
  int64_t elements = value.elements();
  if (elements > kMaxFoldedElements || folded_elements_ > kMaxFoldedTotal - elements) {
    return Fail("folding makes a constant of " + std::to_string(elements) +
                " elements; at most 2^24 each and 2^26 in all");
  }
  folded_elements_ += elements;
  Shape dims = value.dims;
  Define(i, Value{"", std::move(dims), Keep(std::move(value))});
  return OkStatus();
}

void Converter::Define(int i, Value value) {
  if (i >= node_->output_size() || node_->output(i).empty()) {
    return;
  }
  const std::string& name = node_->output(i);
  if (!value.tensor.empty()) {
    // A new tensor starts with its readers; an alias (Identity) adds its own readers to the
    // tensor's and takes away the one read the aliasing node made.
    auto [it, fresh] = tensor_readers_.try_emplace(value.tensor, 0);
    it->second += readers_[name] - (fresh ? 0 : 1);
  }
  values_[name] = std::move(value);
}

std::string Converter::FreshTensor() {
  std::string name;
  do {
    name = "_t" + std::to_string(next_tensor_++);
  } while (used_names_.count(name) > 0);
  used_names_.insert(name);
  return name;
}

Op& Converter::Emit(Op op, Shape shape, int output) {
  op.output = FreshTensor();
  producer_[op.output] = out_.manifest.program.size();
  Define(output, Value{op.output, std::move(shape), nullptr});
  out_.manifest.program.push_back(std::move(op));
  return out_.manifest.program.back();
}

std::string Converter::AddWeight(const std::string& suffix, Shape shape,
                                 std::vector<float> values) {
  std::string base = Sanitize(node_->name().empty() ? node_->op_type() : node_->name());
  std::string name = base + suffix;
  for (int k = 1; used_names_.count(name) > 0; ++k) {
    name = base + "_" + std::to_string(k) + suffix;
  }
  used_names_.insert(name);
  weight_index_[name] = out_.weights.size();
  out_.weights.push_back(Weight{name, std::move(shape), std::move(values)});
  return name;
}

Weight& Converter::WeightNamed(const std::string& name) {
  return out_.weights[weight_index_.at(name)];
}

Op* Converter::SoleProducer(const Value& value) {
  if (value.constant != nullptr) {
    return nullptr;
  }
  auto it = producer_.find(value.tensor);
  if (it == producer_.end() || tensor_readers_[value.tensor] != 1) {
    return nullptr;
  }
  return &out_.manifest.program[it->second];
}

TensorSpec* Converter::ModelInput(const std::string& tensor) {
  for (TensorSpec& spec : out_.manifest.inputs) {
    if (spec.name == tensor) {
      return &spec;
    }
  }
  return nullptr;
}

const ConstTensor* Converter::Keep(ConstTensor tensor) {
  kept_.push_back(std::make_unique<ConstTensor>(std::move(tensor)));
  return kept_.back().get();
}

namespace {

// The dtype a graph input of ONNX element type `type` is declared as (programs convert it to
// FP32 as it arrives); nullopt for types ferry does not take (strings, complex, FP8).
std::optional<DType> InputDType(int type) {
  switch (type) {
    case onnx::TensorProto::FLOAT:
      return DType::kF32;
    case onnx::TensorProto::FLOAT16:
      return DType::kF16;
    case onnx::TensorProto::BFLOAT16:
      return DType::kBF16;
    case onnx::TensorProto::DOUBLE:
      return DType::kF64;
    case onnx::TensorProto::BOOL:
      return DType::kBool;
    case onnx::TensorProto::UINT8:
      return DType::kU8;
    case onnx::TensorProto::INT8:
      return DType::kI8;
    case onnx::TensorProto::UINT16:
      return DType::kU16;
    case onnx::TensorProto::INT16:
      return DType::kI16;
    case onnx::TensorProto::UINT32:
      return DType::kU32;
    case onnx::TensorProto::INT32:
      return DType::kI32;
    case onnx::TensorProto::UINT64:
      return DType::kU64;
    case onnx::TensorProto::INT64:
      return DType::kI64;
    default:
      return std::nullopt;
  }
}

}  // namespace

Status Converter::DefineInputs() {
  const onnx::GraphProto& graph = model_.proto->graph();
  for (const onnx::ValueInfoProto& input : graph.input()) {
    if (model_.initializers.count(input.name()) > 0) {
      continue;  // An initializer listed as an input (IR version < 4): a constant.
    }
    std::string where = "input '" + input.name() + "'";
    if (!input.type().has_tensor_type()) {
      return Fail(where + ": only tensor inputs are supported");
    }
    const onnx::TypeProto::Tensor& type = input.type().tensor_type();
    std::optional<DType> dtype = InputDType(type.elem_type());
    if (!dtype) {
      return Fail(where + " is " +
                  onnx::TensorProto::DataType_Name(
                      static_cast<onnx::TensorProto::DataType>(type.elem_type())) +
                  ": ferry takes BOOL, integer, FLOAT16, BFLOAT16, FLOAT and DOUBLE inputs");
    }
    if (!type.has_shape() || type.shape().dim_size() < 1 ||
        static_cast<size_t>(type.shape().dim_size()) > kMaxOnnxRank) {
      return Fail(where + ": needs a shape of rank 1 to " + std::to_string(kMaxOnnxRank) +
                  " (axis 0 the batch axis)");
    }
    Shape shape = {kBatchDim};
    for (int d = 1; d < type.shape().dim_size(); ++d) {  // Each checked; the row below.
      const auto& dim = type.shape().dim(d);
      if (!dim.has_dim_value() || dim.dim_value() < 1 || dim.dim_value() > (int64_t{1} << 31)) {
        return Fail(where + " axis " + std::to_string(d) + " is dynamic (" +
                    (dim.has_dim_param() ? "'" + dim.dim_param() + "'" : "no size") +
                    "): ferry needs a fixed size for every axis after the batch axis; "
                    "export the model with that axis fixed");
      }
      shape.push_back(dim.dim_value());
    }
    FERRY_RETURN_IF_ERROR(CheckRow(shape, where));
    std::string name = Sanitize(input.name());
    if (!used_names_.insert(name).second) {
      return Fail(where + ": its name, as '" + name + "', is taken by another input");
    }
    out_.manifest.inputs.push_back(TensorSpec{name, *dtype, shape, 0, std::nullopt});
    tensor_readers_[name] = readers_[input.name()];
    values_[input.name()] = Value{name, shape, nullptr};
  }
  if (out_.manifest.inputs.empty() || out_.manifest.inputs.size() > kMaxTensorsPerSide) {
    return Fail("the graph has " + std::to_string(out_.manifest.inputs.size()) +
                " inputs; ferry takes 1 to " + std::to_string(kMaxTensorsPerSide));
  }
  return OkStatus();
}

Status Converter::CheckRow(const Shape& shape, const std::string& what) const {
  if (shape.size() > kMaxOnnxRank) {  // Unsqueeze can add axes: manifests take 8 at most.
    return Fail(what + " has " + std::to_string(shape.size()) + " axes; at most " +
                std::to_string(kMaxOnnxRank));
  }
  if (!NumElements(Shape(shape.begin() + 1, shape.end()))) {
    return Fail(what + " " + ShapeToString(shape) + " has more than 2^40 elements per row");
  }
  return OkStatus();
}

Status Converter::ConvertGelu(const std::string& x) {
  auto it = values_.find(x);
  if (it == values_.end() || it->second.constant != nullptr) {
    return Fail("the GELU's input '" + x + "' must be a tensor computed from the model's inputs");
  }
  Op op;
  op.kind = OpKind::kGelu;
  op.inputs = {it->second.tensor};
  Emit(op, it->second.shape);
  return OkStatus();
}

Status Converter::ConvertNode(const onnx::NodeProto& node) {
  node_ = &node;
  if (fusions_.absorbed.count(&node) > 0) {
    return OkStatus();  // Its work is done by the fused op its subgraph ends in.
  }
  if (auto gelu = fusions_.gelu.find(&node); gelu != fusions_.gelu.end()) {
    return ConvertGelu(gelu->second);
  }
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return Fail("domain '" + node.domain() + "' is not supported (only the default domain)");
  }
  const OpEntry* entry = FindOpConverter(node.op_type());
  if (entry == nullptr) {
    return Fail("op " + node.op_type() + " is not supported; ferry converts " + SupportedOps());
  }
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(
      node.op_type(), static_cast<int>(model_.opset), onnx::ONNX_DOMAIN);
  int version = schema != nullptr ? schema->since_version() : 0;
  if (std::find(entry->versions.begin(), entry->versions.end(), version) == entry->versions.end()) {
    std::string versions;
    for (int v : entry->versions) {
      versions += (versions.empty() ? "" : ", ") + std::to_string(v);
    }
    return Fail("version " + std::to_string(version) + " of " + node.op_type() +
                " is not supported (ferry converts versions " + versions +
                "; re-export the model at opset " + std::to_string(kMaxOpset) + ")");
  }
  for (const std::string& input : node.input()) {
    if (!input.empty() && values_.count(input) == 0) {
      return Fail("input '" + input +
                  "' is not defined by the graph or an earlier node (the graph is not in "
                  "topological order, or has a cycle)");
    }
  }
  bool all_constant = node.input_size() > 0;
  for (int i = 0; i < node.input_size(); ++i) {
    all_constant = all_constant && (Input(i) == nullptr || Input(i)->constant != nullptr);
  }
  Attributes attrs(node);
  if (entry->fold != nullptr && all_constant) {
    FERRY_RETURN_IF_ERROR(entry->fold(*this, attrs));
  } else if (entry->convert == nullptr) {
    return Fail(
        "is folded at import only when every input is a constant (a shape "
        "computation); here an input is computed from the model's inputs");
  } else {
    FERRY_RETURN_IF_ERROR(entry->convert(*this, attrs));
  }
  if (attrs.wrong_type_) {
    return Fail("attribute '" + *attrs.wrong_type_ + "' has the wrong type");
  }
  if (std::optional<std::string> unread = attrs.Unread()) {
    return Fail("attribute '" + *unread + "' is not supported");
  }
  for (int i = 0; i < node.output_size(); ++i) {
    const std::string& output = node.output(i);
    auto defined = values_.find(output);
    if (!output.empty() && defined == values_.end() && readers_[output] > 0) {
      return Fail("output " + std::to_string(i) + " ('" + output + "') is not supported");
    }
    if (defined != values_.end() && !defined->second.tensor.empty()) {
      FERRY_RETURN_IF_ERROR(CheckRow(defined->second.shape, "output '" + output + "'"));
    }
  }
  return OkStatus();
}

Status Converter::DefineOutputs() {
  node_ = nullptr;
  std::map<std::string, std::string> renames;
  for (const onnx::ValueInfoProto& output : model_.proto->graph().output()) {
    auto it = values_.find(output.name());
    std::string where = "output '" + output.name() + "'";
    if (it == values_.end() || it->second.constant != nullptr) {
      return Fail(where + " is not computed from the model's inputs");
    }
    const Value& value = it->second;
    std::string name = Sanitize(output.name());
    if (!used_names_.insert(name).second) {
      return Fail(where + ": its name, as '" + name + "', is taken by an input or output");
    }
    if (producer_.count(value.tensor) == 0 || renames.count(value.tensor) > 0) {
      // A model input or another output passed through (Identity, Dropout): copied by a
      // reshape to the same shape, so every output has an op of its own.
      if (value.shape.size() < 2) {
        return Fail(where + " passes through a tensor of rank " +
                    std::to_string(value.shape.size()) + " without computing it");
      }
      Op copy;
      copy.kind = OpKind::kReshape;
      copy.inputs = {value.tensor};
      copy.output = name;
      copy.shape.assign(value.shape.begin() + 1, value.shape.end());
      out_.manifest.program.push_back(std::move(copy));
    } else {
      renames[value.tensor] = name;
    }
    // The graph's type for the output (an ArgMax gives INT64); the worker converts to it.
    DType dtype = DType::kF32;
    if (output.type().has_tensor_type() && output.type().tensor_type().elem_type() != 0) {
      std::optional<DType> declared = InputDType(output.type().tensor_type().elem_type());
      if (!declared) {
        return Fail(where + " is of a type ferry does not give: BOOL, integers, FLOAT16, " +
                    "BFLOAT16, FLOAT and DOUBLE");
      }
      dtype = *declared;
    }
    out_.manifest.outputs.push_back(TensorSpec{name, dtype, value.shape, 0, std::nullopt});
  }
  if (out_.manifest.outputs.empty() || out_.manifest.outputs.size() > kMaxTensorsPerSide) {
    return Fail("the graph has " + std::to_string(out_.manifest.outputs.size()) +
                " outputs; ferry takes 1 to " + std::to_string(kMaxTensorsPerSide));
  }
  for (Op& op : out_.manifest.program) {
    for (std::string& input : op.inputs) {
      if (auto r = renames.find(input); r != renames.end()) {
        input = r->second;
      }
    }
    if (auto r = renames.find(op.output); r != renames.end()) {
      op.output = r->second;
    }
  }
  return OkStatus();
}

Result<std::vector<ConstTensor>> Converter::Fold() {
  for (const auto& [name, tensor] : model_.initializers) {
    values_[name] = Value{"", tensor.dims, &tensor};
  }
  for (const onnx::NodeProto& node : model_.proto->graph().node()) {
    FERRY_RETURN_IF_ERROR(ConvertNode(node));
  }
  node_ = nullptr;
  std::vector<ConstTensor> out;
  for (const onnx::ValueInfoProto& output : model_.proto->graph().output()) {
    auto it = values_.find(output.name());
    if (it == values_.end() || it->second.constant == nullptr) {
      return Fail("output '" + output.name() + "' does not fold to a constant");
    }
    out.push_back(*it->second.constant);
  }
  return out;
}

Result<ImportedModel> Converter::Run() {
  const onnx::GraphProto& graph = model_.proto->graph();
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& input : node.input()) {
      ++readers_[input];
    }
  }
  for (const onnx::ValueInfoProto& output : graph.output()) {
    ++readers_[output.name()];
  }
  for (const auto& [name, tensor] : model_.initializers) {
    values_[name] = Value{"", tensor.dims, &tensor};
  }
  FERRY_RETURN_IF_ERROR(DefineInputs());
  fusions_ = FindFusions(graph, readers_, model_);
  for (const onnx::NodeProto& node : graph.node()) {
    FERRY_RETURN_IF_ERROR(ConvertNode(node));
    if (out_.manifest.program.size() > kMaxOps) {
      return Fail("the program needs more than " + std::to_string(kMaxOps) + " ops");
    }
  }
  FERRY_RETURN_IF_ERROR(DefineOutputs());
  Manifest& m = out_.manifest;
  m.name = options_.name;
  m.batch_sizes = options_.sizes;
  ShapeVariant variant{"default", {}, {}};
  for (const TensorSpec& t : m.inputs) {
    variant.inputs[t.name] = t.shape;
  }
  for (const TensorSpec& t : m.outputs) {
    variant.outputs[t.name] = t.shape;
  }
  m.variants = {variant};
  out_.onnx_nodes = static_cast<size_t>(graph.node_size());
  return std::move(out_);
}

}  // namespace ferry::onnx_import
