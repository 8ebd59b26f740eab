// Subgraphs the importer converts as one ferry op, found before the node-by-node walk. Today:
// the exact GELU as PyTorch exports nn.GELU,
//   y = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)   or   Mul(Mul(x, 0.5), Add(...)),
// each Add and Mul with its operands in either order, Div by sqrt 2 or Mul by 1 / sqrt 2.
// Every intermediate result must be read by the pattern alone.
//
// Thread safety: pure function; the result points into `graph`, which must outlive it.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>

#include "model/onnx/onnx_file.h"

namespace ferry::onnx_import {

struct Fusions {
  std::set<const onnx::NodeProto*> absorbed;           // Their work is the fused op's.
  std::map<const onnx::NodeProto*, std::string> gelu;  // The last node -> the ONNX name of x.
};

// `readers`: how many node inputs and graph outputs read each value name.
Fusions FindFusions(const onnx::GraphProto& graph, const std::map<std::string, int>& readers,
                    const OnnxModel& model);

}  // namespace ferry::onnx_import
