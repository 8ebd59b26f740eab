// The converter's state while it walks an ONNX graph in node order (internal to
// model/onnx/): what each ONNX value is in ferry's terms, the program so far and the weights.
// onnx_import.cc drives it; onnx_ops.cc converts one node of each supported op.
//
// Thread safety: one Converter per conversion, used by one thread.
#pragma once

#include <onnx/onnx_pb.h>

#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/onnx/fusions.h"
#include "model/onnx/onnx_import.h"

namespace ferry::onnx_import {

// The batch size in a folded integer constant (a shape read from a batched tensor), marked by
// ConstTensor::batch_size: Converter::Constant refuses constants holding it; the shape
// folding in folding.cc carries it through Gather, Concat and the like to a Reshape's first
// value. A mark, not a value, so that no number in a model (INT64_MIN ends a backward Slice)
// is ever taken for it.
// Folded constants: at most 2^24 elements each and 2^26 in all, so a hostile graph
// (ConstantOfShape of [2^31], an Expand or Range loop) cannot exhaust memory at import.
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;
inline constexpr int64_t kMaxFoldedTotal = int64_t{1} << 26;

bool HasBatchSize(const ConstTensor& t);
// Whether ints[i] of `t` is the batch size.
bool IsBatchSize(const ConstTensor& t, size_t i);
// Appends from.ints[i], marked as the batch size where it is one, to *to.
void AppendInt(const ConstTensor& from, size_t i, ConstTensor* to);

// What an ONNX value name stands for: a ferry tensor (batched at axis 0, `shape` holding
// kBatchDim there) or a constant.
struct Value {
  std::string tensor;  // The ferry tensor; empty for a constant.
  Shape shape;
  const ConstTensor* constant = nullptr;
};

// A node's attributes, read once each; Finish() refuses any that no reader asked for.
class Attributes {
 public:
  explicit Attributes(const onnx::NodeProto& node);
  int64_t Int(const std::string& name, int64_t fallback);
  float Float(const std::string& name, float fallback);
  std::string String(const std::string& name, const std::string& fallback);
  std::vector<int64_t> Ints(const std::string& name, std::vector<int64_t> fallback);
  const onnx::TensorProto* Tensor(const std::string& name);
  // The first attribute present that was never read, or nullopt.
  std::optional<std::string> Unread() const;
  // Whether `name` is set at all (read or not).
  bool Has(const std::string& name) const { return by_name_.count(name) > 0; }

 private:
  const onnx::AttributeProto* Find(const std::string& name, onnx::AttributeProto::AttributeType);
  std::map<std::string, const onnx::AttributeProto*> by_name_;
  std::set<std::string> read_;
  std::optional<std::string> wrong_type_;
  friend class Converter;
};

class Converter {
 public:
  Converter(const OnnxModel& model, const ImportOptions& options);
  Result<ImportedModel> Run();
  // FoldGraph (onnx_import.h): every node folded, the outputs' constants returned.
  Result<std::vector<ConstTensor>> Fold();

  // For the op converters (onnx_ops.cc). Errors name the node being converted.
  Error Fail(const std::string& message) const;
  // Input `i` of the current node; nullptr when it is absent or empty.
  const Value* Input(int i) const;
  // Input `i` as a batched tensor / as a constant, or an error saying what it must be.
  // Constant refuses a folded constant that holds the batch size or is batch_broadcast.
  Result<const Value*> Tensor(int i) const;
  Result<const ConstTensor*> Constant(int i) const;
  // Input `i` as any constant, folded ones with the batch size or batch_broadcast included.
  Result<const ConstTensor*> Folded(int i) const;
  // Defines output `i` as the folded constant `value`, within kMaxFoldedElements and
  // kMaxFoldedTotal.
  Status DefineConstant(int i, ConstTensor value);
  // Defines output `i` of the current node as `value`.
  void Define(int i, Value value);
  // Emits `op` (its output a fresh tensor of `shape`) and defines output `output` of the
  // current node as that tensor.
  Op& Emit(Op op, Shape shape, int output = 0);
  // A new weight named after the current node and `suffix` (".weight", ".bias").
  // Invalidates references from WeightNamed.
  std::string AddWeight(const std::string& suffix, Shape shape, std::vector<float> values);
  // REQUIRES: `name` came from AddWeight. The reference lives until the next AddWeight.
  Weight& WeightNamed(const std::string& name);
  // The op that produced `value`'s tensor, when no node or graph output but the current node
  // reads that tensor (under any name): what folding (bias, batch norm) needs.
  Op* SoleProducer(const Value& value);
  // The model input whose ferry tensor is `tensor`, or nullptr (an intermediate tensor).
  TensorSpec* ModelInput(const std::string& tensor);
  // A constant made by this converter (Constant nodes), kept alive for the whole run.
  const ConstTensor* Keep(ConstTensor tensor);

  const onnx::NodeProto& node() const { return *node_; }
  int64_t opset() const { return model_.opset; }

 private:
  Status ConvertNode(const onnx::NodeProto& node);
  // The last node of a GELU subgraph (fusions.h): gelu of the tensor named `x`.
  Status ConvertGelu(const std::string& x);
  Status DefineInputs();
  // Refuses a tensor whose row (every axis after the batch axis) holds more than 2^40
  // elements: every tensor is checked where it is defined, so products of dims never overflow.
  Status CheckRow(const Shape& shape, const std::string& what) const;
  Status DefineOutputs();
  std::string FreshTensor();

  const OnnxModel& model_;
  const ImportOptions& options_;
  const onnx::NodeProto* node_ = nullptr;
  std::map<std::string, Value> values_;
  std::map<std::string, int> readers_;         // ONNX value -> nodes and outputs reading it.
  std::map<std::string, size_t> producer_;     // ferry tensor -> index into program.
  std::map<std::string, int> tensor_readers_;  // ferry tensor -> readers of all its names.
  std::vector<std::unique_ptr<ConstTensor>> kept_;
  Fusions fusions_;
  std::map<std::string, size_t> weight_index_;
  int64_t folded_elements_ = 0;
  std::set<std::string> used_names_;
  ImportedModel out_;
  int next_tensor_ = 0;
};

// Converts the current node of `c` (its op type known to the table in onnx_ops.cc).
using OpConverter = Status (*)(Converter& c, Attributes& attrs);
struct OpEntry {
  OpConverter convert;         // Null for an op ferry folds only (every input a constant).
  std::vector<int> versions;   // The op's versions (since_version) this converter implements.
  OpConverter fold = nullptr;  // Used instead of `convert` when every input is a constant.
};
// The converter of `op_type` in the default domain, or nullptr when ferry has none.
const OpEntry* FindOpConverter(const std::string& op_type);
// "Relu, Conv, ...": every supported op, for messages and docs.
std::string SupportedOps();

// `name` with every character outside [A-Za-z0-9_.-] replaced by '_', at most 100 characters.
std::string Sanitize(const std::string& name);

}  // namespace ferry::onnx_import
