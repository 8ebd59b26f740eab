// The nesting pre-scan (before toml++ parses, so deep input cannot overflow its recursion):
// only real brackets, braces and key parts count, never those inside strings or comments,
// at the exact limit, with the position of the first level too deep.
#include "config/toml_reader.h"

#include <doctest/doctest.h>

#include <string>

namespace ferry {
namespace {

// The diagnostics' text, or "" when `text` parsed.
std::string Refusal(const std::string& text) {
  Diagnostics diagnostics;
  std::optional<toml::table> table = ParseToml(text, "t.toml", &diagnostics);
  if (table) {
    return "";
  }
  std::string message = diagnostics.ToError().message;
  return message.empty() ? "refused without a message" : message;
}

std::string Nested(int depth) {
  return "a = " + std::string(depth, '[') + "1" + std::string(depth, ']') + "\n";
}

bool TooDeep(const std::string& text) {
  return Refusal(text).find("nesting deeper than 32") != std::string::npos;
}

TEST_CASE("nesting: 31 brackets under a key pass, 32 are refused where they go too deep") {
  CHECK(Refusal(Nested(31)) == "");
  CHECK(TooDeep(Nested(32)));
  CHECK(Refusal("b = 1\n" + Nested(32)).find("t.toml:2:") != std::string::npos);
  std::string dotted;
  for (int i = 0; i < 32; ++i) {
    dotted += (i ? "." : "") + std::string(1, static_cast<char>('a' + i % 26)) + std::to_string(i);
  }
  CHECK(Refusal(dotted + " = 1\n") == "");  // 32 key parts.
  CHECK(TooDeep(dotted + ".x = 1\n"));      // 33.
  // An inline table nests inside the key parts that lead to it.
  std::string parts;
  for (int i = 0; i < 30; ++i) {
    parts += (i ? ".p" : "p") + std::to_string(i);
  }
  CHECK(Refusal(parts + " = { q = [1] }\n") == "");  // 30 parts + the brace + [ = 32.
  CHECK(TooDeep(parts + " = { q = [[1]] }\n"));
}

TEST_CASE("brackets in strings and comments do not count; scanning resumes after them") {
  std::string brackets(40, '[');
  CHECK(Refusal("s = \"" + brackets + "\"\n") == "");
  CHECK(Refusal("s = '" + brackets + "'\n") == "");
  CHECK(Refusal("# " + brackets + "\ns = 1\n") == "");
  CHECK(Refusal("s = \"\"\"\n" + brackets + "\n\"\"\"\n") == "");
  CHECK(Refusal("s = '''\n" + brackets + "\n'''\n") == "");
  CHECK(Refusal("s = \"a\\\"" + brackets + "\"\n") == "");  // An escaped quote ends nothing.
  // After each kind of string the scanner is back in the document: depth still counts.
  for (std::string opener : {"s = \"x\"", "s = 'x'", "s = \"\"\"x\"\"\"\"\"", "s = '''x'''''",
                             "s = \"a\\\\\"", "# note"}) {
    CAPTURE(opener);
    CHECK(TooDeep(opener + "\n" + Nested(32)));
    CHECK(TooDeep(opener + " \n" + Nested(32)));
  }
  // Empty strings are not the start of a multi-line one.
  CHECK(TooDeep("s = \"\"\n" + Nested(32)));
  CHECK(TooDeep("s = ''\n" + Nested(32)));
  // An unterminated string ends at its line; the next line is scanned.
  CHECK(TooDeep("s = \"" + brackets + "\n" + Nested(32)));
}

TEST_CASE("commas and newlines end a key: many floats in one array are not nesting") {
  std::string floats = "a = [";
  for (int i = 0; i < 40; ++i) {
    floats += (i ? ", " : "") + std::to_string(i) + ".5";
  }
  CHECK(Refusal(floats + "]\n") == "");
  std::string lines;
  for (int i = 0; i < 40; ++i) {
    lines += "k" + std::to_string(i) + " = 1.5\n";
  }
  CHECK(Refusal(lines) == "");
}

}  // namespace
}  // namespace ferry
