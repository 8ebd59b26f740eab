// [sequence]: a stateful model's states and bounds, and every way a manifest gets them wrong.
#include <doctest/doctest.h>

#include <string>

#include "model/manifest.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

// The example accumulator (y = relu(x + state), the state becoming x + state) up to its
// [sequence] table: each case adds its own.
const std::string kAccumulator = [] {
  std::string text = testing::ReadFile("examples/sequences/accumulator/manifest.toml");
  return text.substr(0, text.find("[sequence]"));
}();

std::string ErrorOf(const std::string& text) {
  Result<Manifest> result = ParseManifest(text, "manifest.toml");
  REQUIRE_FALSE(result.ok());
  return result.error().message;
}

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST_CASE("a stateful model's states are hidden from requests and clients") {
  Result<Manifest> m = ParseManifest(kAccumulator + R"(
[sequence]
max_sequences = 10
max_sequence_idle_us = 5000000
[[sequence.state]]
input = "state_in"
output = "state_out"
)",
                                     "manifest.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  CHECK(m->stateful());
  CHECK(m->sequence.max_sequences == 10);
  CHECK(m->sequence.max_idle_us == 5'000'000);
  REQUIRE(m->sequence.states.size() == 1);
  CHECK(m->sequence.states[0].input == "state_in");
  CHECK(m->inputs.size() == 2);  // The program's interface keeps them.
  REQUIRE(m->request_inputs().size() == 1);
  CHECK(m->request_inputs()[0].name == "x");
  REQUIRE(m->client_outputs().size() == 1);
  CHECK(m->client_outputs()[0].name == "y");
}

TEST_CASE("a model without [sequence] keeps no state and shows every tensor") {
  std::string text = kAccumulator;
  Result<Manifest> m = ParseManifest(text, "manifest.toml");
  REQUIRE(m.ok());
  CHECK_FALSE(m->stateful());
  CHECK(m->request_inputs().size() == 2);
  CHECK(m->client_outputs().size() == 2);
}

TEST_CASE("a [sequence] that names the wrong tensors, sizes or settings is refused") {
  auto with = [](const std::string& sequence) { return kAccumulator + "[sequence]\n" + sequence; };
  CHECK(Contains(ErrorOf(with("")), "1 to 8 [[sequence.state]]"));
  CHECK(Contains(ErrorOf(with("[[sequence.state]]\ninput = \"nope\"\noutput = \"state_out\"\n")),
                 "'nope' is not one of the model's [[inputs]]"));
  CHECK(Contains(ErrorOf(with("[[sequence.state]]\ninput = \"state_in\"\noutput = \"nope\"\n")),
                 "'nope' is not one of the model's [[outputs]]"));
  // Every input a state: nothing left for a client to send.
  CHECK(Contains(ErrorOf(with("[[sequence.state]]\ninput = \"state_in\"\noutput = \"state_out\"\n"
                              "[[sequence.state]]\ninput = \"x\"\noutput = \"y\"\n")),
                 "an input and an output besides its states"));
  CHECK(Contains(ErrorOf(with("[[sequence.state]]\ninput = \"state_in\"\noutput = \"state_out\"\n"
                              "[[sequence.state]]\ninput = \"state_in\"\noutput = \"y\"\n")),
                 "at most one state"));
  std::string state = "[[sequence.state]]\ninput = \"state_in\"\noutput = \"state_out\"\n";
  CHECK(Contains(ErrorOf(with("max_sequences = 0\n" + state)), "max_sequences"));
  CHECK(Contains(ErrorOf(with("max_sequences = 2000000\n" + state)), "max_sequences"));
  CHECK(Contains(ErrorOf(with("max_sequence_idle_us = -1\n" + state)), "max_sequence_idle_us"));
  CHECK(Contains(ErrorOf(with("surprise = 1\n" + state)), "surprise"));
}

TEST_CASE("a state must match its output, keep one row per sequence and keep its shape") {
  std::string mismatched = kAccumulator;
  mismatched.replace(mismatched.find("name = \"state_out\"\ndtype = \"FP32\"\nshape = [-1, 4]"),
                     std::string("name = \"state_out\"\ndtype = \"FP32\"\nshape = [-1, 4]").size(),
                     "name = \"state_out\"\ndtype = \"FP32\"\nshape = [-1, 5]");
  std::string state =
      "[sequence]\n[[sequence.state]]\ninput = \"state_in\"\noutput = \"state_out\"\n";
  CHECK(Contains(ErrorOf(mismatched + state), "the same dtype and shape"));
  std::string varied = kAccumulator +
                       "[[variants]]\nname = \"wide\"\ninputs = { x = [-1, 8], state_in = [-1, 8] "
                       "}\noutputs = { y = [-1, 8], state_out = [-1, 8] }\n" +
                       state;
  CHECK(Contains(ErrorOf(varied), "keeps its shape across variants"));
  std::string huge = kAccumulator;
  for (const char* name : {"state_in", "state_out"}) {
    std::string from = std::string("name = \"") + name + "\"\ndtype = \"FP32\"\nshape = [-1, 4]";
    huge.replace(huge.find(from), from.size(),
                 std::string("name = \"") + name + "\"\ndtype = \"FP32\"\nshape = [-1, 2097152]");
  }
  CHECK(Contains(ErrorOf(huge + state), "exceeds"));
}

TEST_CASE("a stateful model may not have a plugin") {
  CHECK(Contains(
      ErrorOf(kAccumulator + "[hooks]\nplugin = \"p.so\"\n[sequence]\n[[sequence.state]]\ninput = "
                             "\"state_in\"\noutput = \"state_out\"\n"),
      "no plugin"));
}

}  // namespace
}  // namespace ferry
