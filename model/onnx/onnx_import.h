// Converting an ONNX graph into a ferry bundle: the graph's inputs and outputs become the
// manifest's interface (axis 0 of every tensor the batch axis), its nodes a program of ferry's
// ops, its initializers the bundle's FP32 weights. Batch normalization is folded into the
// convolution before it and a constant bias Add into the dense or conv2d before it.
// docs/models.md lists the ops and attributes that convert; anything else is an
// INVALID_ARGUMENT naming the node, its op and the opset, never a wrong answer.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "model/manifest.h"
#include "model/onnx/onnx_file.h"
#include "model/safetensors.h"

namespace ferry::onnx_import {

struct ImportOptions {
  std::string name;                                   // The model's name (the bundle directory's).
  std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32};  // Compiled batch sizes, ascending.
};

// A weight of the bundle, FP32.
using Weight = Float32Tensor;

struct ImportedModel {
  Manifest manifest;            // Interface, sizes, program; no hooks.
  std::vector<Weight> weights;  // In the order the program first uses them.
  size_t onnx_nodes = 0;        // For the report.
};

// REQUIRES: options.name is a valid model name and options.sizes ascending and positive
// (ferryctl checks both; LoadBundle checks the written bundle again).
Result<ImportedModel> ConvertOnnx(const OnnxModel& model, const ImportOptions& options);

// Evaluates a graph whose every input is an initializer with the folding the importer applies
// to shape computations (folding.h), returning each graph output's value in order: how ONNX's
// node tests check the folds. INVALID_ARGUMENT where a node does not fold or an output is not
// a constant.
Result<std::vector<ConstTensor>> FoldGraph(const OnnxModel& model);

// The manifest.toml text of `manifest` (a model, not a pipeline).
std::string ManifestToml(const Manifest& manifest);

// Writes manifest.toml and weights.safetensors into `dir`, which must not exist: they are
// written into a new sibling directory first and renamed into place, so a failure leaves
// nothing behind.
Status WriteBundle(const ImportedModel& model, const std::string& dir);

}  // namespace ferry::onnx_import
