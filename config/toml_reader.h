// Typed, validating reads from a toml++ table, shared by node files and model manifests.
//
// Every getter registers its key as known; Finish() then reports each key of the table that
// no getter asked for, with the nearest known key as a suggestion. A getter that finds a key
// of the wrong type or out of range records a diagnostic (file:line:column, key path) and
// leaves the output untouched, so parsing goes on and all errors are reported at once.
//
// Thread safety: requires external synchronization.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "config/diagnostics.h"

namespace ferry {

// An interval of doubles, e.g. (0, 1].
struct DoubleRange {
  double lo;
  double hi;
  bool lo_open;
  bool hi_open;

  bool Contains(double x) const;
  std::string Describe() const;  // "(0, 1]"; "> 0" when hi is infinite.

  static DoubleRange Positive();     // (0, inf)
  static DoubleRange NonNegative();  // [0, inf)
};

// Parses `text` as TOML. A syntax error is recorded in `diagnostics` and returns nullopt.
std::optional<toml::table> ParseToml(std::string_view text, const std::string& source,
                                     Diagnostics* diagnostics);

// The deepest nesting a TOML document may have, counting together the open brackets and
// braces, the dotted-key parts leading into them and the parts of the key being read
// (a.b.c = 1 is 3 deep; x = {a.b = [1]} is 5). Deeper documents are refused, with the line and
// column, before toml++ parses them (it recurses per level).
inline constexpr int kMaxTomlNesting = 32;

// Reads a whole file; NOT_FOUND / INVALID_ARGUMENT naming the path on failure.
// Files above `max_bytes` are refused, so a hostile path (/dev/zero) cannot exhaust memory.
Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes = 16 << 20);

class TableReader {
 public:
  // `path` is the key path of this table ("" for the root, "scheduler", ...).
  TableReader(const toml::table& table, std::string path, std::string source,
              Diagnostics* diagnostics);

  // Each returns true when the key was present and valid (and *out was set).
  bool String(std::string_view key, std::string* out);
  bool Bool(std::string_view key, bool* out);
  bool Int(std::string_view key, int64_t* out, int64_t min, int64_t max);
  bool Double(std::string_view key, double* out, const DoubleRange& range);  // Ints accepted.
  bool IntArray(std::string_view key, std::vector<int64_t>* out, int64_t min, int64_t max);
  bool StringArray(std::string_view key, std::vector<std::string>* out);

  template <typename E>
  bool Enum(std::string_view key, E* out,
            std::initializer_list<std::pair<std::string_view, E>> names) {
    std::string text;
    if (!String(key, &text)) {
      return false;
    }
    std::string expected;
    for (const auto& [name, value] : names) {
      if (name == text) {
        *out = value;
        return true;
      }
      expected += (expected.empty() ? "" : ", ") + std::string(name);
    }
    std::vector<std::string> candidates;
    for (const auto& entry : names) {
      candidates.emplace_back(entry.first);
    }
    std::string hint = NearestKey(text, candidates);
    ErrorAt(key, "unknown value '" + text + "' (expected one of " + expected + ")" +
                     (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
    return false;
  }

  // A sub-table; nullopt when absent or not a table (the latter is recorded).
  std::optional<TableReader> Table(std::string_view key);
  // Each element of an array of tables; non-table elements are recorded.
  std::vector<TableReader> ArrayOfTables(std::string_view key);
  // Every entry of this table must itself be a table (e.g. [scheduler.models.NAME]);
  // returns (name, reader) pairs and marks them all known.
  std::vector<std::pair<std::string, TableReader>> NamedTables();
  // The raw node, registered as known; nullptr when absent.
  const toml::node* Raw(std::string_view key);

  // Records an error about `key` of this table (its position if present, else the table's).
  void ErrorAt(std::string_view key, std::string message);
  // Reports unknown keys. Call once, after all getters.
  void Finish();

  std::string KeyPath(std::string_view key) const;
  const std::string& source() const { return source_; }
  Diagnostics* diagnostics() const { return diagnostics_; }
  const toml::table& table() const { return *table_; }

 private:
  const toml::node* Lookup(std::string_view key);
  void TypeError(std::string_view key, const toml::node& node, std::string_view expected);

  const toml::table* table_;
  std::string path_;
  std::string source_;
  Diagnostics* diagnostics_;
  std::vector<std::string> known_;
};

// "string", "integer", "array", ...
std::string_view TomlTypeName(const toml::node& node);

}  // namespace ferry
