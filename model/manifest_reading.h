// What manifest.cc (the manifest as a whole) and manifest_ops.cc (its [[program]] ops) share:
// the limits on dimensions and ranks, tensor names, and reading one op. Internal: included by
// those two files only.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>

#include "config/toml_reader.h"
#include "model/manifest.h"

namespace ferry::manifest_reading {

inline constexpr int64_t kMaxDim = int64_t{1} << 31;
inline constexpr size_t kMaxRank = 8;

inline bool ValidName(const std::string& name) {
  return !name.empty() && name.size() <= 128 &&
         std::all_of(name.begin(), name.end(), [](unsigned char ch) {
           return std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.';
         });
}

// One [[program]] entry: its kind, tensors and attributes, each checked; nullopt after
// reporting what is wrong on `r`.
std::optional<Op> ReadOp(TableReader& r);

// [sequence], when present: its settings and states, each state checked against the
// model's tensors (manifest_sequence.cc). REQUIRES: inputs, outputs and variants read.
void ReadSequence(TableReader& r, Manifest* m);

}  // namespace ferry::manifest_reading
