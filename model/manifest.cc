#include "model/manifest.h"

#include <algorithm>
#include <limits>
#include <set>

#include "config/scheduler_config.h"
#include "config/toml_reader.h"
#include "model/manifest_reading.h"

namespace ferry {
namespace {

using manifest_reading::kMaxDim;
using manifest_reading::kMaxRank;
using manifest_reading::ReadOp;
using manifest_reading::ValidName;

constexpr int64_t kMaxBatch = 1 << 20;

// A manifest shape: positive dims and at most one kBatchDim. Returns false after recording.
bool ReadShape(TableReader& r, std::string_view key, Shape* out, bool required) {
  Shape shape;
  if (!r.IntArray(key, &shape, kBatchDim, kMaxDim)) {
    if (required && r.Raw(key) == nullptr) {
      r.ErrorAt(key, "missing (a list of dimensions, -1 marking the batch dimension)");
    }
    return false;
  }
  if (shape.size() > kMaxRank) {
    r.ErrorAt(key, "rank " + std::to_string(shape.size()) + " exceeds " + std::to_string(kMaxRank));
    return false;
  }
  if (std::count(shape.begin(), shape.end(), 0) > 0) {
    r.ErrorAt(key, "dimensions must be positive (0 is not allowed)");
    return false;
  }
  if (std::count(shape.begin(), shape.end(), kBatchDim) > 1) {
    r.ErrorAt(key, "more than one -1: only the batch dimension may be marked");
    return false;
  }
  *out = std::move(shape);
  return true;
}

std::optional<int> BatchAxisOf(const Shape& shape) {
  auto it = std::find(shape.begin(), shape.end(), kBatchDim);
  if (it == shape.end()) {
    return std::nullopt;
  }
  return static_cast<int>(it - shape.begin());
}

// True (with an error) when root.key is an array longer than `limit`: checked before its
// entries are read, so a hostile file cannot make the reading itself unbounded.
bool TooMany(TableReader& root, std::string_view key, size_t limit) {
  const toml::node* raw = root.Raw(key);
  if (raw != nullptr && raw->is_array() && raw->as_array()->size() > limit) {
    root.ErrorAt(key, std::to_string(raw->as_array()->size()) +
                          " entries, more than the limit of " + std::to_string(limit));
    return true;
  }
  return false;
}

// BYTES (text) comes only from clients, to a plugin: [[hooks.inputs]] or a pipeline's
// [[inputs]]. Programs compute on numbers, and no plugin call can allocate a BYTES output.
void RefuseBytes(TableReader& r, std::string_view key, const std::vector<TensorSpec>& specs) {
  for (const TensorSpec& spec : specs) {
    if (spec.dtype == DType::kBytes) {
      r.ErrorAt(key, "'" + spec.name +
                         "' is BYTES, which only clients send, to a plugin: declare it in "
                         "[[hooks.inputs]] (or a pipeline's [[inputs]])");
    }
  }
}

std::vector<TensorSpec> ReadTensors(TableReader& root, std::string_view key) {
  std::vector<TensorSpec> specs;
  if (TooMany(root, key, kMaxTensorsPerSide)) {
    return specs;
  }
  std::set<std::string> seen;
  for (TableReader& r : root.ArrayOfTables(key)) {
    TensorSpec spec;
    bool ok = true;
    if (!r.String("name", &spec.name)) {
      r.ErrorAt("name", "missing tensor name");
      ok = false;
    } else if (!ValidName(spec.name)) {
      r.ErrorAt("name", "'" + spec.name + "': use letters, digits, '_', '-', '.'");
      ok = false;
    } else if (!seen.insert(spec.name).second) {
      r.ErrorAt("name", "'" + spec.name + "' is declared twice");
      ok = false;
    }
    std::string dtype = "FP32";
    r.String("dtype", &dtype);
    if (auto parsed = DTypeFromKServe(dtype)) {
      spec.dtype = *parsed;
    } else {
      r.ErrorAt("dtype", "unknown dtype '" + dtype + "' (expected a KServe name like FP32)");
      ok = false;
    }
    ok = ReadShape(r, "shape", &spec.shape, true) && ok;
    if (r.Raw("range") != nullptr) {
      std::vector<int64_t> range;
      if (!IsInteger(spec.dtype) || !r.IntArray("range", &range, INT64_MIN, INT64_MAX) ||
          range.size() != 2 || range[0] > range[1]) {
        r.ErrorAt("range", "an integer tensor's range = [min, max], min <= max");
        ok = false;
      } else {
        spec.range = std::array<int64_t, 2>{range[0], range[1]};
      }
    }
    r.Finish();
    if (ok) {
      spec.batch_axis = BatchAxisOf(spec.shape);
      specs.push_back(std::move(spec));
    }
  }
  const toml::node* raw = root.Raw(key);
  if (specs.empty() && (raw == nullptr || (raw->is_array() && raw->as_array()->empty()))) {
    root.ErrorAt(key, "at least one [[" + std::string(key) + "]] is required");
  }
  return specs;
}

// "default": the shapes declared under [[inputs]] and [[outputs]].
ShapeVariant DefaultVariant(const Manifest& m) {
  ShapeVariant base{"default", {}, {}};
  for (const TensorSpec& t : m.inputs) {
    base.inputs[t.name] = t.shape;
  }
  for (const TensorSpec& t : m.outputs) {
    base.outputs[t.name] = t.shape;
  }
  return base;
}

// [batching] sizes: strictly ascending positive sizes, or [0] for an unbatched module (which
// may not mark a batch dimension).
void ReadBatching(TableReader& r, Manifest& m) {
  if (auto batching = r.Table("batching")) {
    if (batching->IntArray("sizes", &m.batch_sizes, 0, kMaxBatch)) {
      bool unbatched = m.batch_sizes == std::vector<int64_t>{0};
      bool ascending =
          !m.batch_sizes.empty() &&
          std::adjacent_find(m.batch_sizes.begin(), m.batch_sizes.end(),
                             [](int64_t a, int64_t b) { return a >= b; }) == m.batch_sizes.end() &&
          m.batch_sizes[0] > 0;
      if (!unbatched && !ascending) {
        batching->ErrorAt("sizes",
                          "expected strictly ascending positive sizes, or [0] for an "
                          "unbatched module");
      }
      if (unbatched) {
        for (const auto* group : {&m.inputs, &m.outputs}) {
          for (const TensorSpec& t : *group) {
            if (t.batch_axis) {
              batching->ErrorAt("sizes",
                                "an unbatched module ([0]) cannot mark a batch "
                                "dimension, but '" +
                                    t.name + "' does");
            }
          }
        }
      }
    } else if (batching->Raw("sizes") == nullptr) {
      batching->ErrorAt("sizes", "missing compiled batch sizes");
    }
    batching->Finish();
  } else {
    r.ErrorAt("batching", "missing [batching] sizes");
  }
}

// The default shape variant, then each [[variants]] entry's shapes (the batch dimension kept
// where its tensor declares it).
void ReadVariants(TableReader& r, Manifest& m) {
  const ShapeVariant base = DefaultVariant(m);
  m.variants.push_back(base);
  std::vector<TableReader> variant_tables;
  if (!TooMany(r, "variants", kMaxVariants - 1)) {
    variant_tables = r.ArrayOfTables("variants");
  }
  for (TableReader& v : variant_tables) {
    ShapeVariant variant = base;
    if (!v.String("name", &variant.name) || !ValidName(variant.name)) {
      v.ErrorAt("name", "missing or invalid variant name");
    }
    for (const ShapeVariant& other : m.variants) {
      if (other.name == variant.name) {
        v.ErrorAt("name", "variant '" + variant.name + "' is declared twice");
      }
    }
    for (auto [key, specs, shapes] : {std::tuple{"inputs", &m.inputs, &variant.inputs},
                                      std::tuple{"outputs", &m.outputs, &variant.outputs}}) {
      auto table = v.Table(key);
      if (!table) {
        continue;
      }
      for (const TensorSpec& spec : *specs) {
        Shape shape;
        if (ReadShape(*table, spec.name, &shape, false)) {
          if (BatchAxisOf(shape) != spec.batch_axis) {
            table->ErrorAt(spec.name,
                           "a variant must keep the batch dimension where the "
                           "tensor declares it");
          }
          (*shapes)[spec.name] = shape;
        }
      }
      table->Finish();
    }
    v.Finish();
    m.variants.push_back(std::move(variant));
  }
}

// [[program]]: each op reading only inputs or earlier ops' outputs, defining each tensor once.
// Returns the tensors defined and the number of ops read (kMaxOps + 1 when there were too
// many to read).
size_t ReadProgram(TableReader& r, Manifest& m, std::set<std::string>* defined_out) {
  std::set<std::string>& defined = *defined_out;
  for (const TensorSpec& t : m.inputs) {
    defined.insert(t.name);
  }
  size_t index = 0;
  std::vector<TableReader> op_tables;
  if (!TooMany(r, "program", kMaxOps)) {
    op_tables = r.ArrayOfTables("program");
  } else {
    index = kMaxOps + 1;  // Reported; not "missing".
  }
  for (TableReader& op_reader : op_tables) {
    std::optional<Op> op = ReadOp(op_reader);
    if (op) {
      for (const std::string& input : op->inputs) {
        if (defined.count(input) == 0) {
          op_reader.ErrorAt(op->inputs.size() > 1 ? "inputs" : "input",
                            "op " + std::to_string(index) + " (" +
                                std::string(OpKindName(op->kind)) + ") reads '" + input +
                                "', which no input or earlier op defines");
        }
      }
      if (!defined.insert(op->output).second) {
        op_reader.ErrorAt("output",
                          "op " + std::to_string(index) + " redefines tensor '" + op->output + "'");
      }
      m.program.push_back(std::move(*op));
    }
    ++index;
  }
  if (index == 0) {
    r.ErrorAt("program", "missing [[program]]: a model needs at least one op");
  }
  return index;
}

// A model's executable part: compiled sizes, shape variants, the program.
void ReadExecutable(TableReader& r, Manifest* manifest) {
  Manifest& m = *manifest;
  ReadBatching(r, m);
  ReadVariants(r, m);
  std::set<std::string> defined;
  size_t index = ReadProgram(r, m, &defined);
  // Shape inference runs every op at every (variant, size): bound each count and the product.
  if (m.batch_sizes.size() > kMaxBatchSizes) {
    r.ErrorAt("batching", std::to_string(m.batch_sizes.size()) +
                              " compiled sizes, more than the limit of " +
                              std::to_string(kMaxBatchSizes));
  }
  uint64_t steps = uint64_t{m.variants.size()} * m.batch_sizes.size() * index;
  if (index <= kMaxOps && steps > kMaxInferenceSteps) {
    r.ErrorAt("program", "variants x compiled sizes x ops = " + std::to_string(steps) +
                             ", more than the limit of " + std::to_string(kMaxInferenceSteps));
  }
  for (const TensorSpec& out : m.outputs) {
    if (defined.count(out.name) == 0) {
      r.ErrorAt("outputs", "output '" + out.name + "' is not produced by the program");
    }
  }
}

// A pipeline's part: the models its plugin's run() may call, and nothing a program needs.
void ReadPipeline(TableReader& r, Manifest* manifest) {
  Manifest& m = *manifest;
  for (const char* key : {"batching", "variants", "program"}) {
    if (r.Raw(key) != nullptr) {
      r.ErrorAt(key, "a pipeline has no " + std::string(key) +
                         ": its plugin's run() calls models that do");
    }
  }
  m.variants.push_back(DefaultVariant(m));
  auto pipeline = r.Table("pipeline");
  if (!pipeline) {
    r.ErrorAt("pipeline", "missing [pipeline] calls: the models the pipeline may call");
    return;
  }
  if (pipeline->StringArray("calls", &m.calls)) {
    std::set<std::string> seen;
    if (m.calls.empty() || m.calls.size() > kMaxPipelineCalls) {
      pipeline->ErrorAt("calls", "expected 1 to " + std::to_string(kMaxPipelineCalls) + " models");
    }
    for (const std::string& call : m.calls) {
      if (!IsValidModelName(call)) {
        pipeline->ErrorAt("calls", "'" + call + "' is not a valid model name");
      } else if (call == m.name) {
        pipeline->ErrorAt("calls", "a pipeline cannot call itself");
      } else if (!seen.insert(call).second) {
        pipeline->ErrorAt("calls", "'" + call + "' is listed twice");
      }
    }
  } else if (pipeline->Raw("calls") == nullptr) {
    pipeline->ErrorAt("calls", "missing: the models the pipeline may call");
  }
  pipeline->Bool("decoupled", &m.decoupled);
  pipeline->Finish();
}

// version_policy = "all" | { latest = N } | { specific = [V, ...] }.
void ReadVersionPolicy(TableReader& r, VersionPolicy* policy) {
  const toml::node* raw = r.Raw("version_policy");
  if (raw == nullptr) {
    return;
  }
  const std::string expected = "expected \"all\", { latest = N } or { specific = [V, ...] }";
  if (raw->is_string()) {
    std::string text;
    r.String("version_policy", &text);
    if (text == "all") {
      policy->kind = VersionPolicy::Kind::kAll;
    } else {
      r.ErrorAt("version_policy", expected);
    }
    return;
  }
  auto table = r.Table("version_policy");
  if (!table) {
    return;
  }
  bool latest = table->Int("latest", &policy->latest, 1, kMaxVersionsServed);
  bool specific = table->IntArray("specific", &policy->specific, 1, kMaxVersionNumber);
  if (latest == specific) {
    table->ErrorAt("latest", expected + " (exactly one key)");
  } else if (specific) {
    policy->kind = VersionPolicy::Kind::kSpecific;
    if (policy->specific.empty() || policy->specific.size() > kMaxVersionsServed) {
      table->ErrorAt("specific",
                     "expected 1 to " + std::to_string(kMaxVersionsServed) + " version numbers");
    }
  }
  table->Finish();
}

}  // namespace

Shape TensorSpec::At(int64_t batch) const {
  Shape out = shape;
  for (int64_t& d : out) {
    if (d == kBatchDim) {
      d = batch;
    }
  }
  return out;
}

bool Manifest::all_batched() const {
  auto batched = [](const TensorSpec& t) { return t.batch_axis.has_value(); };
  return std::all_of(inputs.begin(), inputs.end(), batched) &&
         std::all_of(outputs.begin(), outputs.end(), batched);
}

Result<Manifest> ParseManifest(std::string_view text, const std::string& source) {
  Diagnostics diagnostics;
  std::optional<toml::table> root = ParseToml(text, source, &diagnostics);
  if (!root) {
    return diagnostics.ToError();
  }
  Manifest m;
  TableReader r(*root, "", source, &diagnostics);
  if (!r.String("name", &m.name) || !IsValidModelName(m.name)) {
    r.ErrorAt("name", "missing or invalid model name (letters, digits, '_', '-', '.')");
  }
  m.version_stated = r.Int("version", &m.version, 1, kMaxVersionNumber);
  ReadVersionPolicy(r, &m.version_policy);
  r.Enum<ModelKind>("kind", &m.kind,
                    {{"model", ModelKind::kModel}, {"pipeline", ModelKind::kPipeline}});
  r.Enum<Precision>(
      "precision", &m.precision,
      {{"fp32", Precision::kFp32}, {"tf32", Precision::kTf32}, {"bf16", Precision::kBf16}});
  m.inputs = ReadTensors(r, "inputs");
  m.outputs = ReadTensors(r, "outputs");
  RefuseBytes(r, "inputs", m.kind == ModelKind::kPipeline ? std::vector<TensorSpec>() : m.inputs);
  RefuseBytes(r, "outputs", m.outputs);
  for (const TensorSpec& out : m.outputs) {
    for (const TensorSpec& in : m.inputs) {
      if (in.name == out.name) {
        r.ErrorAt("outputs", "'" + out.name + "' is both an input and an output");
      }
    }
  }

  if (m.kind == ModelKind::kPipeline) {
    ReadPipeline(r, &m);
  } else {
    ReadExecutable(r, &m);
  }

  if (auto hooks = r.Table("hooks")) {
    if (hooks->String("plugin", &m.hooks.plugin)) {
      if (m.hooks.plugin.empty() || m.hooks.plugin[0] == '/' ||
          m.hooks.plugin.find("..") != std::string::npos ||
          m.hooks.plugin.find('\0') != std::string::npos || m.hooks.plugin.size() > 4096) {
        hooks->ErrorAt("plugin",
                       "must be a relative path inside the bundle, without '..' or NUL, at most "
                       "4096 bytes");
      }
    }
    hooks->Bool("preserves_rows", &m.hooks.preserves_rows);
    if (hooks->String("config", &m.hooks.config) && m.hooks.config.size() > kMaxHookConfigBytes) {
      hooks->ErrorAt("config", "longer than " + std::to_string(kMaxHookConfigBytes) + " bytes");
    }
    for (auto [key, specs] :
         {std::pair{"inputs", &m.hooks.inputs}, {"outputs", &m.hooks.outputs}}) {
      if (hooks->table().get(key) != nullptr) {  // Optional, unlike the model's own.
        *specs = ReadTensors(*hooks, key);
      }
    }
    RefuseBytes(*hooks, "outputs", m.hooks.outputs);
    if (m.hooks.plugin.empty() && (!m.hooks.inputs.empty() || !m.hooks.outputs.empty())) {
      hooks->ErrorAt(m.hooks.inputs.empty() ? "outputs" : "inputs",
                     "client tensors differ from the model's only through a plugin; set "
                     "hooks.plugin");
    }
    if (m.kind == ModelKind::kPipeline) {
      for (const char* key : {"inputs", "outputs", "preserves_rows"}) {
        if (hooks->table().get(key) != nullptr) {
          hooks->ErrorAt(key, "a pipeline's clients send its [[inputs]] and get its [[outputs]]");
        }
      }
    }
    hooks->Finish();
  }
  manifest_reading::ReadSequence(r, &m);
  if (m.kind == ModelKind::kPipeline && m.hooks.plugin.empty()) {
    r.ErrorAt("hooks", "a pipeline needs [hooks] plugin: the plugin whose run() it is");
  }
  r.Finish();
  if (!diagnostics.empty()) {
    return diagnostics.ToError();
  }
  return m;
}

}  // namespace ferry
