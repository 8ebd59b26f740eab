// Builders of small ONNX graphs for the importer's tests (model/onnx/*_test.cc).
//
// Thread safety: plain functions over the model they are given.
#pragma once

#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <span>
#include <string>
#include <vector>

#include "model/onnx/onnx_import.h"

namespace ferry::onnx_import::graphs {

// A model of opset 17 with one FP32 input x of shape [N, dims...].
inline onnx::ModelProto Model(const std::vector<int64_t>& dims, int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("g");
  auto* input = m.mutable_graph()->add_input();
  input->set_name("x");
  auto* type = input->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  type->mutable_shape()->add_dim()->set_dim_param("N");
  for (int64_t d : dims) {
    type->mutable_shape()->add_dim()->set_dim_value(d);
  }
  return m;
}

inline onnx::NodeProto* Node(onnx::ModelProto& m, const std::string& op,
                             std::vector<std::string> in, const std::string& out) {
  onnx::NodeProto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(m.graph().node_size()));
  for (const std::string& i : in) {
    n->add_input(i);
  }
  n->add_output(out);
  return n;
}

inline void Output(onnx::ModelProto& m, const std::string& name) {
  m.mutable_graph()->add_output()->set_name(name);
}

inline void Init(onnx::ModelProto& m, const std::string& name, std::vector<int64_t> dims,
                 std::vector<float> values) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) {
    t->add_dims(d);
  }
  for (float v : values) {
    t->add_float_data(v);
  }
}

inline void IntInit(onnx::ModelProto& m, const std::string& name, std::vector<int64_t> dims,
                    std::vector<int64_t> values) {
  onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) {
    t->add_dims(d);
  }
  for (int64_t v : values) {
    t->add_int64_data(v);
  }
}

inline void IntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void IntsAttr(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) {
    a->add_ints(x);
  }
}

inline std::string Bytes(const onnx::ModelProto& m) { return m.SerializeAsString(); }

inline Result<OnnxModel> Parse(const std::string& bytes, const std::string& dir = "") {
  return ParseOnnx(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                   "m.onnx", dir);
}

inline Result<ImportedModel> Import(const onnx::ModelProto& m) {
  Result<OnnxModel> parsed = Parse(Bytes(m));
  if (!parsed.ok()) {
    return parsed.error();
  }
  return ConvertOnnx(*parsed, ImportOptions{"m", {1, 4}});
}

inline std::string ErrorOf(const onnx::ModelProto& m) {
  Result<ImportedModel> r = Import(m);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kInvalidArgument);
  return r.error().message;
}

inline bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

inline const Weight* FindWeight(const ImportedModel& m, const std::string& name) {
  for (const Weight& w : m.weights) {
    if (w.name == name) {
      return &w;
    }
  }
  return nullptr;
}

}  // namespace ferry::onnx_import::graphs
