#include "config/toml_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/file.h"

namespace ferry {
namespace {

std::string FormatDouble(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

bool DoubleRange::Contains(double x) const {
  if (std::isnan(x)) {
    return false;
  }
  bool above = lo_open ? x > lo : x >= lo;
  bool below = hi_open ? x < hi : x <= hi;
  return above && below;
}

std::string DoubleRange::Describe() const {
  if (std::isinf(hi)) {
    return std::string(lo_open ? "> " : ">= ") + FormatDouble(lo);
  }
  return std::string(lo_open ? "(" : "[") + FormatDouble(lo) + ", " + FormatDouble(hi) +
         (hi_open ? ")" : "]");
}

DoubleRange DoubleRange::Positive() {
  return {0.0, std::numeric_limits<double>::infinity(), true, true};
}
DoubleRange DoubleRange::NonNegative() {
  return {0.0, std::numeric_limits<double>::infinity(), false, true};
}

std::string_view TomlTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "date/time";
    default:
      return "nothing";
  }
}

namespace {

// Finds the first place where `text` nests deeper than kMaxTomlNesting, without parsing it:
// one linear pass that skips strings and comments and counts every level toml++ 3.3 builds
// (recursively, so deeper input would overflow the stack before it could be refused): open
// brackets and braces, plus the parts of the dotted keys that lead into them, plus the parts
// of the key being read. A float value ("1.5") counts one part, which only errs on the safe
// side.
std::optional<std::pair<size_t, size_t>> FindTooDeep(std::string_view text) {
  size_t line = 1, column = 0;
  // Per open bracket or brace: the dotted-key parts that lead into it.
  std::vector<int> opened;
  int enclosing = 0;  // Sum over `opened`, plus one level per entry.
  int dots = 0;       // Dots of the key (or value) being read.
  int key_dots = 0;   // Dots of the key before the last '=', which a '{' after it nests in.
  auto advance = [&](char ch) {
    if (ch == '\n') {
      ++line;
      column = 0;
    } else {
      ++column;
    }
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char ch = text[i];
    advance(ch);
    if (ch == '\n' || ch == ',') {
      dots = 0;
      key_dots = 0;
      continue;
    }
    if (ch == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') {
        advance(text[++i]);
      }
      continue;
    }
    if (ch == '"' || ch == '\'') {
      bool basic = ch == '"';
      bool multiline = i + 2 < text.size() && text[i + 1] == ch && text[i + 2] == ch;
      size_t j = i + (multiline ? 3 : 1);
      for (column += multiline ? 2 : 0; j < text.size(); ++j) {
        if (basic && text[j] == '\\' && j + 1 < text.size()) {
          advance(text[j]);
          advance(text[++j]);  // The escaped character, a newline included.
          continue;
        }
        if (!multiline && text[j] == '\n') {
          break;  // Unterminated: toml++ refuses it; scanning resumes on the next line.
        }
        if (text[j] == ch &&
            (!multiline || (j + 2 < text.size() && text[j + 1] == ch && text[j + 2] == ch))) {
          break;
        }
        advance(text[j]);
      }
      if (j < text.size() && text[j] == ch) {
        size_t quotes = 0;  // A multi-line string may end with up to 5 quotes ("x""""").
        while (j + quotes < text.size() && text[j + quotes] == ch &&
               quotes < (multiline ? 5u : 1u)) {
          ++quotes;
        }
        column += quotes;
        i = j + quotes - 1;
      } else {
        i = j - 1;  // At the newline that ends an unterminated string, or the end.
      }
      continue;
    }
    switch (ch) {
      case '=':
        key_dots = dots;
        dots = 0;
        break;
      case '[':
      case '{': {
        int parts = key_dots + dots;
        opened.push_back(parts);
        enclosing += parts + 1;
        dots = 0;
        key_dots = 0;
        break;
      }
      case ']':
      case '}':
        if (!opened.empty()) {
          enclosing -= opened.back() + 1;
          opened.pop_back();
        }
        dots = 0;
        key_dots = 0;
        break;
      case '.':
        ++dots;
        break;
      default:
        break;
    }
    // The key being read has dots + 1 parts.
    if (enclosing + dots + 1 > kMaxTomlNesting) {
      return std::pair{line, column};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<toml::table> ParseToml(std::string_view text, const std::string& source,
                                     Diagnostics* diagnostics) {
  if (auto at = FindTooDeep(text)) {
    diagnostics->Add({source, static_cast<uint32_t>(at->first), static_cast<uint32_t>(at->second),
                      "",
                      "nesting deeper than " + std::to_string(kMaxTomlNesting) +
                          " levels (brackets, braces or dotted-key parts)"});
    return std::nullopt;
  }
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    diagnostics->Add({source, e.source().begin.line, e.source().begin.column, "",
                      "TOML syntax error: " + std::string(e.description())});
  }
  return std::nullopt;
}

Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes) {
  return ReadRegularFile(path, max_bytes, Symlinks::kFollow);
}

TableReader::TableReader(const toml::table& table, std::string path, std::string source,
                         Diagnostics* diagnostics)
    : table_(&table),
      path_(std::move(path)),
      source_(std::move(source)),
      diagnostics_(diagnostics) {}

std::string TableReader::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const toml::node* TableReader::Lookup(std::string_view key) {
  known_.emplace_back(key);
  return table_->get(key);
}

const toml::node* TableReader::Raw(std::string_view key) { return Lookup(key); }

void TableReader::ErrorAt(std::string_view key, std::string message) {
  const toml::node* node = table_->get(key);
  const toml::source_region& where = node != nullptr ? node->source() : table_->source();
  diagnostics_->Add(
      {source_, where.begin.line, where.begin.column, KeyPath(key), std::move(message)});
}

void TableReader::TypeError(std::string_view key, const toml::node& node,
                            std::string_view expected) {
  ErrorAt(key, "expected " + std::string(expected) + ", got " + std::string(TomlTypeName(node)));
}

bool TableReader::String(std::string_view key, std::string* out) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return false;
  }
  if (!node->is_string()) {
    TypeError(key, *node, "a string");
    return false;
  }
  *out = node->as_string()->get();
  return true;
}

bool TableReader::Bool(std::string_view key, bool* out) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return false;
  }
  if (!node->is_boolean()) {
    TypeError(key, *node, "a boolean");
    return false;
  }
  *out = node->as_boolean()->get();
  return true;
}

bool TableReader::Int(std::string_view key, int64_t* out, int64_t min, int64_t max) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return false;
  }
  if (!node->is_integer()) {
    TypeError(key, *node, "an integer");
    return false;
  }
  int64_t value = node->as_integer()->get();
  if (value < min || value > max) {
    std::string range = max == std::numeric_limits<int64_t>::max()
                            ? ">= " + std::to_string(min)
                            : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    ErrorAt(key, "must be " + range + ", got " + std::to_string(value));
    return false;
  }
  *out = value;
  return true;
}

bool TableReader::Double(std::string_view key, double* out, const DoubleRange& range) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return false;
  }
  double value = 0;
  if (node->is_floating_point()) {
    value = node->as_floating_point()->get();
  } else if (node->is_integer()) {
    value = static_cast<double>(node->as_integer()->get());
  } else {
    TypeError(key, *node, "a number");
    return false;
  }
  if (!range.Contains(value)) {
    std::string describe = range.Describe();
    bool interval = describe[0] == '(' || describe[0] == '[';
    ErrorAt(key, "must be " + std::string(interval ? "in " : "") + describe + ", got " +
                     FormatDouble(value));
    return false;
  }
  *out = value;
  return true;
}

bool TableReader::IntArray(std::string_view key, std::vector<int64_t>* out, int64_t min,
                           int64_t max) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return false;
  }
  if (!node->is_array()) {
    TypeError(key, *node, "an array of integers");
    return false;
  }
  std::vector<int64_t> values;
  size_t index = 0;
  for (const toml::node& element : *node->as_array()) {
    if (!element.is_integer()) {
      ErrorAt(key, "element " + std::to_string(index) + ": expected an integer, got " +
                       std::string(TomlTypeName(element)));
      return false;
    }
    int64_t value = element.as_integer()->get();
    if (value < min || value > max) {
      ErrorAt(key, "element " + std::to_string(index) + ": must be in [" + std::to_string(min) +
                       ", " + std::to_string(max) + "], got " + std::to_string(value));
      return false;
    }
    values.push_back(value);
    ++index;
  }
  *out = std::move(values);
  return true;
}

bool TableReader::StringArray(std::string_view key, std::vector<std::string>* out) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return false;
  }
  if (!node->is_array()) {
    TypeError(key, *node, "an array of strings");
    return false;
  }
  std::vector<std::string> values;
  size_t index = 0;
  for (const toml::node& element : *node->as_array()) {
    if (!element.is_string()) {
      ErrorAt(key, "element " + std::to_string(index) + ": expected a string, got " +
                       std::string(TomlTypeName(element)));
      return false;
    }
    values.push_back(element.as_string()->get());
    ++index;
  }
  *out = std::move(values);
  return true;
}

std::optional<TableReader> TableReader::Table(std::string_view key) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return std::nullopt;
  }
  if (!node->is_table()) {
    TypeError(key, *node, "a table");
    return std::nullopt;
  }
  return TableReader(*node->as_table(), KeyPath(key), source_, diagnostics_);
}

std::vector<TableReader> TableReader::ArrayOfTables(std::string_view key) {
  std::vector<TableReader> readers;
  const toml::node* node = Lookup(key);
  if (node == nullptr) {
    return readers;
  }
  if (!node->is_array()) {
    TypeError(key, *node, "an array of tables ([[" + KeyPath(key) + "]])");
    return readers;
  }
  size_t index = 0;
  for (const toml::node& element : *node->as_array()) {
    std::string element_path = KeyPath(key) + "[" + std::to_string(index) + "]";
    if (!element.is_table()) {
      diagnostics_->Add({source_, element.source().begin.line, element.source().begin.column,
                         element_path,
                         "expected a table, got " + std::string(TomlTypeName(element))});
    } else {
      readers.emplace_back(*element.as_table(), element_path, source_, diagnostics_);
    }
    ++index;
  }
  return readers;
}

std::vector<std::pair<std::string, TableReader>> TableReader::NamedTables() {
  std::vector<std::pair<std::string, TableReader>> readers;
  for (const auto& [key, node] : *table_) {
    std::string name(key.str());
    known_.push_back(name);
    if (!node.is_table()) {
      TypeError(name, node, "a table");
      continue;
    }
    readers.emplace_back(name, TableReader(*node.as_table(), KeyPath(name), source_, diagnostics_));
  }
  return readers;
}

void TableReader::Finish() {
  for (const auto& [key, node] : *table_) {
    std::string name(key.str());
    if (std::find(known_.begin(), known_.end(), name) != known_.end()) {
      continue;
    }
    std::string hint = NearestKey(name, known_);
    diagnostics_->Add(
        {source_, key.source().begin.line, key.source().begin.column, KeyPath(name),
         "unknown key" + (hint.empty() ? std::string() : "; did you mean '" + hint + "'?")});
  }
}

}  // namespace ferry
