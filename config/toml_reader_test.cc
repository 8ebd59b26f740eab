// The nesting pre-scan (before toml++ parses, so deep input cannot overflow its recursion):
// only real brackets, braces and key parts count, never those inside strings or comments,
// at the exact limit, with the position of the first level too deep.
#include "config/toml_reader.h"

#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <utility>

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

TEST_CASE("a string closes where it ends: what follows on its line is scanned, columns count it") {
  // The closing quote is not read again as an opening one: nesting after a string in an
  // inline array still counts.
  for (std::string element : {"\"x\"", "'x'"}) {
    CAPTURE(element);
    std::string deep =
        "a = [" + element + ", " + std::string(31, '[') + "1" + std::string(32, ']') + "\n";
    CHECK(TooDeep(deep));
  }
  // a(1) ' '(2) =(3) ' '(4) [(5) "(6) xyz(7-9) "(10) ,(11) ' '(12): the 32nd bracket is
  // the 31st after the string, at column 43.
  std::string after = "a = [\"xyz\", " + std::string(31, '[') + "1" + std::string(32, ']') + "\n";
  CHECK(Refusal(after).find("t.toml:1:43:") != std::string::npos);
  std::string escaped = "a = [\"x\\\"z\", " + std::string(31, '[') + "1" + std::string(32, ']');
  CHECK(Refusal(escaped).find("t.toml:1:44:") != std::string::npos);  // One more: the '\'.
}

TEST_CASE("a closed bracket forgets the key parts read inside it") {
  // [1.5] counts one part for the float while open; after ']' the next '[' starts from zero,
  // so 31 more brackets are 32 deep: within the limit, and toml++ reports the syntax error.
  std::string text = "a = [1.5]" + std::string(31, '[') + "1" + std::string(31, ']') + "\n";
  std::string refusal = Refusal(text);
  CHECK(refusal.find("TOML syntax error") != std::string::npos);
  CHECK(refusal.find("nesting deeper") == std::string::npos);
}

// The diagnostics' text after reading `key` of `text`'s root with `read`.
template <typename Read>
std::string ReadError(const std::string& text, Read read) {
  Diagnostics diagnostics;
  std::optional<toml::table> table = ParseToml(text, "t.toml", &diagnostics);
  REQUIRE(table);
  TableReader reader(*table, "", "t.toml", &diagnostics);
  read(reader);
  return diagnostics.empty() ? "" : diagnostics.ToError().message;
}

TEST_CASE("a value of the wrong type is reported with the type it has") {
  auto as_string = [&](TableReader& r) {
    std::string out = "untouched";
    CHECK_FALSE(r.String("k", &out));
    CHECK(out == "untouched");
  };
  const std::pair<const char*, const char*> cases[] = {
      {"k = 1", "got integer"},          {"k = 1.5", "got float"},
      {"k = true", "got boolean"},       {"k = [1]", "got array"},
      {"k = {a = 1}", "got table"},      {"k = 1979-05-27", "got date/time"},
      {"k = 07:32:00", "got date/time"}, {"k = 1979-05-27T07:32:00Z", "got date/time"},
  };
  for (const auto& one_case : cases) {
    const char* text = one_case.first;  // Named, not a structured binding: CAPTURE takes it.
    const char* expected = one_case.second;
    CAPTURE(text);
    std::string error = ReadError(text, as_string);
    CHECK(error.find(std::string("t.toml:1:5: k: expected a string, ") + expected) !=
          std::string::npos);
  }
  CHECK(ReadError("k = 's'", [](TableReader& r) {
          bool b = false;
          CHECK_FALSE(r.Bool("k", &b));
        }).find("expected a boolean, got string") != std::string::npos);
  CHECK(ReadError("k = 's'", [](TableReader& r) {
          double d = 7;
          CHECK_FALSE(r.Double("k", &d, DoubleRange::Positive()));
          CHECK(d == 7);
        }).find("expected a number, got string") != std::string::npos);
  CHECK(ReadError("k = 1.0", [](TableReader& r) {
          int64_t i = 7;
          CHECK_FALSE(r.Int("k", &i, 0, 10));
          CHECK(i == 7);
        }).find("expected an integer, got float") != std::string::npos);
}

TEST_CASE("typed readers: values, ranges at their edges, integers read as numbers") {
  auto ok = [](const std::string& text, auto check) { CHECK(ReadError(text, check) == ""); };
  ok("k = true", [](TableReader& r) {
    bool b = false;
    CHECK(r.Bool("k", &b));
    CHECK(b);
  });
  ok("k = false", [](TableReader& r) {
    bool b = true;
    CHECK(r.Bool("k", &b));
    CHECK_FALSE(b);
  });
  ok("k = 3", [](TableReader& r) {
    double d = 0;
    CHECK(r.Double("k", &d, DoubleRange::Positive()));
    CHECK(d == 3.0);
  });
  ok("k = -2.5", [](TableReader& r) {
    double d = 0;
    CHECK(r.Double("k", &d, {-2.5, 1, false, false}));
    CHECK(d == -2.5);
  });
  ok("k = 10", [](TableReader& r) {
    int64_t i = 0;
    CHECK(r.Int("k", &i, 0, 10));
    CHECK(i == 10);
  });
  CHECK(ReadError("k = 11", [](TableReader& r) {
          int64_t i = 0;
          CHECK_FALSE(r.Int("k", &i, 0, 10));
        }).find("must be in [0, 10], got 11") != std::string::npos);
  CHECK(ReadError("k = -1", [](TableReader& r) {
          int64_t i = 0;
          CHECK_FALSE(r.Int("k", &i, 0, std::numeric_limits<int64_t>::max()));
        }).find("must be >= 0, got -1") != std::string::npos);
  CHECK(ReadError("k = 0", [](TableReader& r) {
          double d = 5;
          CHECK_FALSE(r.Double("k", &d, DoubleRange::Positive()));
          CHECK(d == 5);
        }).find("must be > 0, got 0") != std::string::npos);
  CHECK(ReadError("k = 1.5", [](TableReader& r) {
          double d = 5;
          CHECK_FALSE(r.Double("k", &d, {0, 1, true, false}));
        }).find("must be in (0, 1], got 1.5") != std::string::npos);
  // An absent key is no error and leaves the output alone.
  ok("other = 1", [](TableReader& r) {
    std::string s = "x";
    CHECK_FALSE(r.String("k", &s));
    CHECK(s == "x");
  });
}

}  // namespace
}  // namespace ferry
