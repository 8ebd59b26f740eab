// A model bundle's manifest.toml: the model's interface (inputs, outputs, batch axes),
// compiled batch sizes, shape variants, the program the executors run, and hook settings.
// docs/bundles.md documents the format with an example.
//
// ParseManifest checks structure (types, names, references between ops); shape inference
// against the weights is model/bundle.h's job.
//
// Thread safety: plain data and pure functions; safe for concurrent use.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/dtype.h"

namespace ferry {

using Shape = std::vector<int64_t>;

// Limits on a manifest, checked by ParseManifest before any shape inference (docs/bundles.md).
inline constexpr size_t kMaxVariants = 64;               // Including "default".
inline constexpr size_t kMaxTensorsPerSide = 64;         // [[inputs]], and [[outputs]].
inline constexpr size_t kMaxBatchSizes = 64;             // Compiled batch sizes.
inline constexpr size_t kMaxOps = 4096;                  // Program length.
inline constexpr uint64_t kMaxInferenceSteps = 1 << 16;  // variants x sizes x ops.
inline constexpr size_t kMaxHookConfigBytes = 64 << 10;  // [hooks] config.
inline constexpr size_t kMaxPipelineCalls = 16;          // [pipeline] calls.
inline constexpr size_t kMaxConcatInputs = 64;           // A concat's inputs.

// A version number has at most 18 digits (model keys, config/scheduler_config.h); a policy
// names at most this many versions.
inline constexpr int64_t kMaxVersionNumber = 999'999'999'999'999'999;
inline constexpr int64_t kMaxVersionsServed = 16;

// In a manifest shape, this marks the batch dimension ("shape = [-1, 784]").
inline constexpr int64_t kBatchDim = -1;

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;                    // kBatchDim at batch_axis, positive elsewhere.
  std::optional<int> batch_axis;  // nullopt: the tensor has no batch dimension.
  // Integer inputs only: the closed range every value must lie in, checked per request by
  // the hook host before the request reaches a worker (a gather's indices: [0, rows - 1]).
  std::optional<std::array<int64_t, 2>> range;

  // The concrete shape for `batch` rows.
  Shape At(int64_t batch) const;
};

// One set of input shapes sharing the model's weights. variants[0] is "default": the shapes
// declared under [[inputs]].
struct ShapeVariant {
  std::string name;
  std::map<std::string, Shape> inputs;   // Every model input, in manifest notation.
  std::map<std::string, Shape> outputs;  // Every model output, in manifest notation.
};

enum class OpKind {
  kDense,
  kRelu,
  kGelu,
  kTanh,
  kSigmoid,
  kSoftmax,
  kLayerNorm,
  kAdd,
  kConv2d,
  kMaxPool2d,
  kGlobalAvgPool,
  kFlatten,
  kReshape,
  kClip,
  kGather,
  kReduceMean,
  kSub,
  kMul,
  kDiv,
  kTranspose,
  kMatMul,
  kSlice,
  kSqrt,
  kExp,
  kLog,
  kLeakyRelu,
  kHardSigmoid,
  kHardSwish,
  kAvgPool2d,
  kReduceSum,
  kReduceMax,
  kLogSoftmax,
  kConcat,
  kArgMax,
};
// add, sub, mul, div: elementwise with numpy broadcasting.
bool IsBinaryElementwise(OpKind kind);
std::string_view OpKindName(OpKind kind);

struct Op {
  OpKind kind = OpKind::kRelu;
  // Tensor names: one, two (binary ops, matmul) or up to kMaxConcatInputs (concat).
  std::vector<std::string> inputs;
  std::string output;  // A new tensor name.
  // Safetensors name: dense, layernorm, conv2d, gather, and a binary op's constant operand.
  std::string weight;
  std::string bias;  // Safetensors name, optional for dense and conv2d.
  // softmax, log_softmax, the reductions (the axis they remove), slice, concat.
  int64_t axis = -1;
  int64_t start = 0, end = 0;            // slice: the range [start, end) kept along axis.
  double eps = 1e-5;                     // layernorm.
  std::array<int64_t, 2> kernel{0, 0};   // maxpool2d, avgpool2d.
  std::array<int64_t, 2> stride{1, 1};   // conv2d and the pools (a pool's default: kernel).
  std::array<int64_t, 2> padding{0, 0};  // conv2d, maxpool2d, avgpool2d.
  bool count_pad = false;                // avgpool2d: padding counts in each window's mean.
  // maxpool2d: output sizes round up; a last window may run past the input's end (never one
  // that would start in the right padding).
  bool ceil = false;
  bool last_index = false;     // arg_max: the last of equal maxima (default: the first).
  double alpha = 0, beta = 0;  // leaky_relu (alpha), hard_sigmoid (alpha x + beta).
  int64_t groups = 1;          // conv2d: channel groups (depthwise: groups = C).
  double min = 0, max = 0;     // clip: the closed range values are clamped to.
  Shape shape;                 // reshape: the new shape of all but axis 0.
  std::vector<int64_t> perm;   // transpose: output axis i is input axis perm[i].
  bool reverse = false;        // Binary op with a weight: weight OP input.
};

// GEMM arithmetic for backends that have a choice (the CPU reference is always fp32).
enum class Precision { kFp32, kTf32, kBf16 };

struct ManifestHooks {
  std::string plugin;          // Path relative to the bundle; empty when there is none.
  bool preserves_rows = true;  // Preprocess keeps one client row per executable row.
  std::string config;          // Handed to the plugin's create() (at most 64 KiB).
  // What clients send and receive when the plugin transforms them ([[hooks.inputs]],
  // [[hooks.outputs]], declared like [[inputs]]); empty: the model's own inputs / outputs.
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

// A model runs a program on a worker; a pipeline runs its plugin's run() in the hook hosts,
// which calls models (docs/bundles.md, "Pipelines").
enum class ModelKind { kModel, kPipeline };

// One implicit state of a stateful model (Triton's implicit state management): a program
// input the worker feeds from the sequence's slot (zeros on the sequence's first request) and
// the program output it takes back into that slot after each request. Clients never send or
// see either (docs/bundles.md, "Sequences").
struct SequenceState {
  std::string input, output;  // Names in [[inputs]] and [[outputs]].
};

// [sequence]: a stateful model. Every request carries a sequence_id, of one row; the worker
// holding the sequence keeps its states between requests.
struct SequenceSettings {
  std::vector<SequenceState> states;  // Empty: the model keeps no state.
  int64_t max_sequences = 1024;       // Live sequences per worker; one more start is refused.
  int64_t max_idle_us = 60'000'000;   // A sequence unused this long is dropped.
  // inputs / outputs without the states: what a submission and a completion carry.
  std::vector<TensorSpec> request_inputs, request_outputs;
};

inline constexpr size_t kMaxSequenceStates = 8;
inline constexpr int64_t kMaxSequences = int64_t{1} << 20;
// max_sequences x the states' bytes per sequence, at most.
inline constexpr int64_t kMaxSequenceStateBytes = int64_t{4} << 30;

// Which versions of a versioned model the node serves (Triton's version_policy; docs/bundles.md,
// "Versions"). The newest version directory's manifest decides; a single-version bundle
// ignores it.
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t latest = 1;             // kLatest: the highest `latest` version numbers, >= 1.
  std::vector<int64_t> specific;  // kSpecific: these versions (those present are served).
};

struct Manifest {
  std::string name;
  int64_t version = 1;
  bool version_stated = false;  // The text has a `version` key (else 1, or a version directory's).
  VersionPolicy version_policy;
  ModelKind kind = ModelKind::kModel;
  Precision precision = Precision::kFp32;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // Ascending compiled batch sizes; {0} for an unbatched module.
  std::vector<int64_t> batch_sizes;
  std::vector<ShapeVariant> variants;
  std::vector<Op> program;
  ManifestHooks hooks;
  // A pipeline's [pipeline] calls: the models its run() may call (none of them a pipeline).
  // A pipeline has no batch sizes, no program and one variant ("default").
  std::vector<std::string> calls;
  // [pipeline] decoupled: its run() answers with zero, one or many responses (host->send),
  // served over gRPC ModelStreamInfer only. Its plugin must speak ABI version 3.
  bool decoupled = false;
  SequenceSettings sequence;

  bool pipeline() const { return kind == ModelKind::kPipeline; }
  bool unbatched() const { return batch_sizes.size() == 1 && batch_sizes[0] == 0; }
  bool stateful() const { return !sequence.states.empty(); }
  // The model's tensors a submission carries and a completion answers: all of them but the
  // sequence states, in manifest order.
  const std::vector<TensorSpec>& request_inputs() const {
    return stateful() ? sequence.request_inputs : inputs;
  }
  const std::vector<TensorSpec>& request_outputs() const {
    return stateful() ? sequence.request_outputs : outputs;
  }
  // The tensors clients send and receive: the hook's when declared, else the model's.
  const std::vector<TensorSpec>& client_inputs() const {
    return hooks.inputs.empty() ? request_inputs() : hooks.inputs;
  }
  const std::vector<TensorSpec>& client_outputs() const {
    return hooks.outputs.empty() ? request_outputs() : hooks.outputs;
  }
  // Every input and output has a batch axis (a precondition for coalescing).
  bool all_batched() const;
};

// Parses manifest text; every structural error is reported at once, each with
// "source:line:column: key.path: message".
Result<Manifest> ParseManifest(std::string_view text, const std::string& source);

}  // namespace ferry
