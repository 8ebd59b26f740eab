// Collected configuration errors: every error in a file is reported at once, each with the
// file, line, column and key path, so an operator fixes them in one pass.
//
// Thread safety: requires external synchronization.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ferry {

struct Diagnostic {
  std::string source;    // File path, or "environment FERRY_SCHEDULER_X".
  uint32_t line = 0;     // 1-based; 0 when no position is known.
  uint32_t column = 0;   // 1-based; 0 when no position is known.
  std::string key_path;  // "scheduler.models.mlp.weight"; empty for syntax errors.
  std::string message;

  // "node.toml:3:12: scheduler.cost_ema_alpha: must be in (0, 1], got 1.5"
  std::string ToString() const;
};

class Diagnostics {
 public:
  // Keeps the first kMaxDiagnostics; later ones are only counted (a hostile file must not
  // make the report itself unbounded).
  static constexpr size_t kMaxDiagnostics = 100;
  void Add(Diagnostic diagnostic) {
    if (items_.size() < kMaxDiagnostics) {
      items_.push_back(std::move(diagnostic));
    } else {
      ++dropped_;
    }
  }
  size_t dropped() const { return dropped_; }
  bool empty() const { return items_.empty(); }
  const std::vector<Diagnostic>& items() const { return items_; }

  // One INVALID_ARGUMENT error whose message lists every diagnostic, one per line.
  // REQUIRES: !empty().
  Error ToError() const;

 private:
  std::vector<Diagnostic> items_;
  size_t dropped_ = 0;
};

// Edit distance, for "did you mean" suggestions.
size_t EditDistance(const std::string& a, const std::string& b);

// The candidate closest to `key` when it is close enough to be a likely typo, else "".
std::string NearestKey(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace ferry
