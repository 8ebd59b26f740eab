// [sequence]: a stateful model's settings and implicit states (docs/bundles.md, "Sequences").
#include <algorithm>
#include <set>

#include "model/manifest_reading.h"

namespace ferry::manifest_reading {
namespace {

const TensorSpec* Find(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const TensorSpec& t : specs) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

// The tensors of `all` but those named in `names`, in order.
std::vector<TensorSpec> Without(const std::vector<TensorSpec>& all,
                                const std::set<std::string>& names) {
  std::vector<TensorSpec> kept;
  for (const TensorSpec& t : all) {
    if (names.count(t.name) == 0) {
      kept.push_back(t);
    }
  }
  return kept;
}

// What is wrong with state input `in` paired with output `out`, or "".
std::string StateProblem(const Manifest& m, const TensorSpec& in, const TensorSpec& out) {
  if (in.dtype != out.dtype || in.shape != out.shape) {
    return "state input '" + in.name + "' and output '" + out.name +
           "' must have the same dtype and shape";
  }
  if (in.batch_axis != std::optional<int>(0)) {
    return "a state must have the batch dimension first (one row per sequence)";
  }
  for (const ShapeVariant& v : m.variants) {
    auto shape_in = v.inputs.find(in.name);
    auto shape_out = v.outputs.find(out.name);
    if ((shape_in != v.inputs.end() && shape_in->second != in.shape) ||
        (shape_out != v.outputs.end() && shape_out->second != out.shape)) {
      return "variant '" + v.name + "' changes the shape of state '" + in.name +
             "': a state keeps its shape across variants";
    }
  }
  return "";
}

}  // namespace

void ReadSequence(TableReader& r, Manifest* m) {
  std::optional<TableReader> table = r.Table("sequence");
  if (!table) {
    return;
  }
  SequenceSettings& s = m->sequence;
  table->Int("max_sequences", &s.max_sequences, 1, kMaxSequences);
  table->Int("max_sequence_idle_us", &s.max_idle_us, 1000, int64_t{86'400} * 1'000'000);
  std::vector<TableReader> states = table->ArrayOfTables("state");
  if (states.empty() || states.size() > kMaxSequenceStates) {
    table->ErrorAt("state", "expected 1 to " + std::to_string(kMaxSequenceStates) +
                                " [[sequence.state]] tables");
  }
  if (m->pipeline() || !m->hooks.plugin.empty()) {
    table->ErrorAt("state",
                   "a stateful model is a model with no plugin: its program keeps the "
                   "state");
  }
  std::set<std::string> used_in, used_out;
  int64_t bytes_per_sequence = 0;
  for (TableReader& state : states) {
    SequenceState st;
    state.String("input", &st.input);
    state.String("output", &st.output);
    const TensorSpec* in = Find(m->inputs, st.input);
    const TensorSpec* out = Find(m->outputs, st.output);
    if (in == nullptr) {
      state.ErrorAt("input", "'" + st.input + "' is not one of the model's [[inputs]]");
    } else if (out == nullptr) {
      state.ErrorAt("output", "'" + st.output + "' is not one of the model's [[outputs]]");
    } else if (!used_in.insert(st.input).second || !used_out.insert(st.output).second) {
      state.ErrorAt("input", "each input and output holds at most one state");
    } else if (std::string problem = StateProblem(*m, *in, *out); !problem.empty()) {
      state.ErrorAt("input", problem);
    } else {
      std::optional<uint64_t> row = TensorByteSize(in->dtype, in->At(1));
      if (!row || *row > static_cast<uint64_t>(kMaxSequenceStateBytes)) {
        state.ErrorAt("input", "state '" + st.input + "' is too large");
      } else {
        bytes_per_sequence += static_cast<int64_t>(*row);
      }
    }
    state.Finish();
    s.states.push_back(std::move(st));
  }
  if (bytes_per_sequence > 0 && s.max_sequences > kMaxSequenceStateBytes / bytes_per_sequence) {
    table->ErrorAt("max_sequences", "max_sequences x the states' bytes per sequence (" +
                                        std::to_string(bytes_per_sequence) + ") exceeds " +
                                        std::to_string(kMaxSequenceStateBytes) + " bytes");
  }
  s.request_inputs = Without(m->inputs, used_in);
  s.request_outputs = Without(m->outputs, used_out);
  if ((s.request_inputs.empty() || s.request_outputs.empty()) && !states.empty()) {
    table->ErrorAt("state", "a stateful model needs an input and an output besides its states");
  }
  table->Finish();
}

}  // namespace ferry::manifest_reading
