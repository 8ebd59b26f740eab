// The KServe v2 codec against the protocol's rules and hostile bodies.
#include "hookhost/frontend/kserve_codec.h"

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <tuple>

#include "model/manifest.h"

namespace ferry::frontend {
namespace {

using nlohmann::json;

std::vector<float> Floats(std::span<const uint8_t> bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST_CASE("the priority parameter: 0 or absent is the default level, 1..3 a level, else refused") {
  auto parse = [](std::string parameters) {
    return ParseInferRequest(
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}])" + parameters + "}",
        "");
  };
  CHECK(parse("").value().priority == kDefaultPriority);
  CHECK(parse(R"(,"parameters":{"priority":0})").value().priority == kDefaultPriority);
  CHECK(parse(R"(,"parameters":{"priority":1})").value().priority == kHighestPriority);
  CHECK(parse(R"(,"parameters":{"priority":3})").value().priority == kLowestPriority);
  for (const char* bad : {"-1", "4", "256", "9223372036854775807"}) {
    Result<ParsedInfer> refused = parse(std::string(R"(,"parameters":{"priority":)") + bad + "}");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::kInvalidArgument);
    CHECK(refused.error().message.find(std::string("\"priority\" is ") + bad) != std::string::npos);
  }
}

TEST_CASE("JSON inputs: flat and nested data, every datatype converted and range-checked") {
  Result<ParsedInfer> p = ParseInferRequest(
      R"({"id":"r1","inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"data":[[1,2],[3.5,-4]]},
          {"name":"b","datatype":"BOOL","shape":[3],"data":[true,false,true]},
          {"name":"i","datatype":"INT8","shape":[2],"data":[-128,127]},
          {"name":"u","datatype":"UINT64","shape":[1],"data":[18446744073709551615]}],
          "parameters":{"timeout":5000,"priority":2}})",
      "");
  REQUIRE(p.ok());
  CHECK(p->id == "r1");
  CHECK(p->timeout_us == 5000);
  CHECK(p->priority == 2);
  REQUIRE(p->request.inputs.size() == 4);
  CHECK(p->request.inputs[0].shape == Shape{2, 2});
  CHECK(Floats(p->request.inputs[0].bytes) == std::vector<float>{1, 2, 3.5f, -4});
  CHECK(std::vector<uint8_t>(p->request.inputs[1].bytes.begin(),
                             p->request.inputs[1].bytes.end()) == std::vector<uint8_t>{1, 0, 1});
  CHECK(static_cast<int8_t>(p->request.inputs[2].bytes[0]) == -128);
  uint64_t u;
  std::memcpy(&u, p->request.inputs[3].bytes.data(), 8);
  CHECK(u == UINT64_MAX);
}

// KServe's BYTES serialization: a 4-byte little-endian length, then the bytes, per element.
std::string Serialized(const std::vector<std::string>& strings) {
  std::string out;
  for (const std::string& s : strings) {
    auto n = static_cast<uint32_t>(s.size());
    out += std::string{static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
    out += s;
  }
  return out;
}

TEST_CASE("BYTES inputs: JSON strings and binary data, serialized and checked element by element") {
  Result<ParsedInfer> p = ParseInferRequest(
      R"({"inputs":[{"name":"t","datatype":"BYTES","shape":[2,2],"data":[["a","\u00e9\n"],["",""]]}]})",
      "");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  const hookhost::ClientTensor& t = p->request.inputs[0];
  CHECK(t.dtype == DType::kBytes);
  CHECK(std::string(t.bytes.begin(), t.bytes.end()) == Serialized({"a", "\xc3\xa9\n", "", ""}));

  std::string binary = Serialized({"hello", "", "world!"});
  auto header = [&](size_t size, int count) {
    return R"({"inputs":[{"name":"t","datatype":"BYTES","shape":[)" + std::to_string(count) +
           R"(],"parameters":{"binary_data_size":)" + std::to_string(size) + "}}]}";
  };
  Result<ParsedInfer> b = ParseInferRequest(header(binary.size(), 3), binary);
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.error().message));
  CHECK(std::string(b->request.inputs[0].bytes.begin(), b->request.inputs[0].bytes.end()) ==
        binary);
  // Hostile binary BYTES: a length past the end, a truncated length, bytes after the last
  // element, fewer elements than the shape, a length near 2^32, a size beyond the section.
  std::string lying = binary;
  lying[0] = 100;
  std::string huge = std::string("\xff\xff\xff\xff", 4) + "x";
  const std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
      {header(lying.size(), 3), lying, 3, "claims 100 bytes"},
      {header(7, 3), binary.substr(0, 7), 3, "claims"},
      {header(binary.size() - 2, 3), binary.substr(0, binary.size() - 2), 3, "claims 6 bytes"},
      {header(binary.size(), 2), binary, 2, "after its 2 elements"},
      {header(binary.size(), 4), binary, 4, "ends before its length"},
      {header(huge.size(), 1), huge, 1, "claims 4294967295 bytes"},
      {header(binary.size() + 1, 3), binary, 3, "truncated"},
  };
  for (const auto& one_case : bad) {
    // Named, not structured bindings: CAPTURE's and CHECK's lambdas take them.
    const auto& [json, data, count, want_bound] = one_case;
    const std::string& want = want_bound;
    CAPTURE(want);
    Result<ParsedInfer> r = ParseInferRequest(json, data);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
    CHECK(r.error().message.find(want) != std::string::npos);
  }
}

TEST_CASE("binary inputs: sizes must match the shape and add up to the binary section") {
  std::string binary(16, '\0');
  float f[4] = {1, 2, 3, 4};
  std::memcpy(binary.data(), f, 16);
  std::string header =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}],
          "outputs":[{"name":"y","parameters":{"binary_data":true}}]})";
  Result<ParsedInfer> p = ParseInferRequest(header, binary);
  REQUIRE(p.ok());
  CHECK(Floats(p->request.inputs[0].bytes) == std::vector<float>{1, 2, 3, 4});
  REQUIRE(p->outputs.size() == 1);
  CHECK(p->outputs[0].binary);
  // Truncated, too long, lying sizes.
  CHECK(ParseInferRequest(header, binary.substr(0, 15)).error().message.find("truncated") !=
        std::string::npos);
  CHECK(ParseInferRequest(header, binary + "x").error().message.find("the inputs use 16") !=
        std::string::npos);
  std::string lying =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":8}}]})";
  CHECK(ParseInferRequest(lying, binary.substr(0, 8)).error().message.find("make 16 bytes") !=
        std::string::npos);
}

TEST_CASE("shared-memory places: checked when parsed, bytes left to the region's read") {
  std::string header =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":
            {"shared_memory_region":"in","shared_memory_byte_size":16,"shared_memory_offset":32}},
          {"name":"z","datatype":"FP32","shape":[1],"data":[5]}],
          "outputs":[{"name":"y","parameters":{"shared_memory_region":"out",
                                               "shared_memory_byte_size":64}}]})";
  Result<ParsedInfer> p = ParseInferRequest(header, "");
  REQUIRE(p.ok());
  REQUIRE(p->shm_inputs.size() == 1);
  CHECK(p->shm_inputs[0].first == 0);
  CHECK(p->shm_inputs[0].second.region == "in");
  CHECK(p->shm_inputs[0].second.offset == 32);
  CHECK(p->request.inputs[0].bytes.empty());
  CHECK(Floats(p->request.inputs[1].bytes) == std::vector<float>{5});
  REQUIRE(p->outputs[0].shm.has_value());
  CHECK(p->outputs[0].shm->byte_size == 64);

  auto error = [](const std::string& params) {
    std::string body =
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":)" + params + "}]}";
    Result<ParsedInfer> r = ParseInferRequest(body, "");
    return r.ok() ? std::string("accepted") : r.error().message;
  };
  auto has = [](const std::string& s, const char* what) {
    return s.find(what) != std::string::npos;
  };
  CHECK(has(error(R"({"shared_memory_region":"in"})"), "needs shared_memory_byte_size"));
  CHECK(
      has(error(R"({"shared_memory_region":"in","shared_memory_byte_size":12})"), "make 16 bytes"));
  CHECK(has(error(R"({"shared_memory_region":"in","shared_memory_byte_size":16,
                       "shared_memory_offset":-1})"),
            "may be negative"));
  CHECK(has(error(R"({"shared_memory_region":"../x","shared_memory_byte_size":16})"),
            "not a region's name"));
  CHECK(has(error(R"({"shared_memory_region":7,"shared_memory_byte_size":16})"), "a string"));
  CHECK(has(error(R"({"shared_memory_region":"in","shared_memory_byte_size":16,
                       "binary_data_size":16})"),
            "binary_data_size"));
  std::string with_data =
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1,1],"data":[1],"parameters":
            {"shared_memory_region":"in","shared_memory_byte_size":4}}]})";
  CHECK(has(ParseInferRequest(with_data, "").error().message, "with \"data\""));
}

TEST_CASE("a sequence's id and flags are read; a zero or empty id is none; others refused") {
  auto body = [](const std::string& params) {
    return R"({"parameters":)" + params +
           R"(,"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]})";
  };
  Result<ParsedInfer> p =
      ParseInferRequest(body(R"({"sequence_id":18446744073709551615,"sequence_start":true})"), "");
  REQUIRE(p.ok());
  CHECK(p->request.sequence_id == UINT64_MAX);
  CHECK(p->request.sequence_start);
  CHECK_FALSE(p->request.sequence_end);
  p = ParseInferRequest(body(R"({"sequence_id":7,"sequence_end":true})"), "");
  REQUIRE(p.ok());
  CHECK(p->request.sequence_id == 7);
  CHECK(p->request.sequence_end);
  for (const char* params : {R"({"sequence_id":0})", R"({"sequence_id":""})",
                             R"({"sequence_start":false,"sequence_end":false})"}) {
    CAPTURE(params);
    p = ParseInferRequest(body(params), "");
    REQUIRE(p.ok());
    CHECK(p->request.sequence_id == 0);
  }
  auto error = [&](const char* params) {
    Result<ParsedInfer> r = ParseInferRequest(body(params), "");
    REQUIRE(!r.ok());
    return r.error().message;
  };
  CHECK(error(R"({"sequence_id":"corr-1"})") == kSequenceIdText);
  for (const char* params : {R"({"sequence_id":[1]})", R"({"sequence_id":-1})",
                             R"({"sequence_id":1.5})", R"({"sequence_id":18446744073709551616})"}) {
    CAPTURE(params);
    CHECK(error(params).find("unsigned 64-bit integer") != std::string::npos);
  }
  CHECK(error(R"({"sequence_start":1})").find("boolean") != std::string::npos);
}

TEST_CASE("hostile requests are refused with what was wrong, never crash") {
  struct Case {
    std::string body;
    std::string says;
  };
  std::vector<Case> cases = {
      {"", "not a JSON object"},
      {"[]", "not a JSON object"},
      {"{", "not a JSON object"},
      {std::string(10000, '['), "not a JSON object"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]} {})",
       "not a JSON object"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],)",
       "not a JSON object"},
      {"{\"inputs\":[{\"name\":\"x\xff\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}",
       "not a JSON object"},  // Not UTF-8.
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":)" + std::string(40, '[') +
           "1" + std::string(40, ']') + "}]}",
       "nested deeper"},
      {R"({"inputs":[{"name":"x","datatype":"FP64","shape":[1000000000],"data":[1]}]})",
       "shape holds 1000000000 elements but a body of 75 bytes cannot"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1e39]}]})",
       "out of the range of FP32"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1,1e39]}]})",
       "element 1: value out of the range of FP32"},
      {R"({"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[9223372036854775808]}]})",
       "out of range"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"outputs":[{"name":"y","parameters":{"binary_data":1}}]})",
       "must be a boolean"},
      {R"({"inputs":[]})", "1 to 64 tensors"},
      {R"({"inputs":{}})", "1 to 64 tensors"},
      {R"({"inputs":[{"datatype":"FP32","shape":[1],"data":[1]}]})", "string \"name\""},
      {R"({"inputs":[{"name":"x","datatype":"FP99","shape":[1],"data":[1]}]})",
       "unsupported datatype"},
      {R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":[1]}]})",
       "element 0: a string was expected"},
      {R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[2],"data":["a"]}]})",
       "holds 2 elements but \"data\" has 1"},
      {R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["a","b"]}]})",
       "more elements than its shape holds"},
      {R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[100000],"data":["a"]}]})", "cannot"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[-1],"data":[1]}]})", ">= 0"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":"1","data":[1]}]})", "\"shape\""},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[4611686018427387904,8],"data":[1]}]})",
       "too large"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[1,2]}]})",
       "holds 3 elements but \"data\" has 2"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1,2]}]})", "has more"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":["1"]}]})",
       "a number was expected"},
      {R"({"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[128]}]})", "out of range"},
      {R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[1],"data":[-1]}]})", "out of range"},
      {R"({"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1.5]}]})",
       "integer was expected"},
      {R"({"inputs":[{"name":"x","datatype":"BOOL","shape":[1],"data":[1]}]})", "true or false"},
      {R"({"inputs":[{"name":"x","datatype":"FP16","shape":[1],"data":[1]}]})", "binary data"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1]}]})", "no \"data\""},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"parameters":{"timeout":-5}})",
       ">= 0"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"parameters":{"binary_data_output":"yes"}})",
       "must be a boolean"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"outputs":[{}]})",
       "string \"name\""},
      {R"({"id":5,"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]})",
       "\"id\" must be a string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body.substr(0, 100));
    Result<ParsedInfer> p = ParseInferRequest(c.body, "");
    REQUIRE_FALSE(p.ok());
    CHECK(p.error().code == ErrorCode::kInvalidArgument);
    CHECK(p.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("fields in any order; deep nesting where nothing is read costs no stack") {
  // "data" before the shape and type it needs, in the second of two inputs.
  Result<ParsedInfer> p = ParseInferRequest(
      R"({"outputs":[{"name":"y"}],"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":[7]},
          {"data":[[0.5,-1],[2,3]],"parameters":{"x":[[[]]]},"shape":[2,2],"name":"b\u0078","datatype":"FP32"}],
          "parameters":{"binary_data_output":true}})",
      "");
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  REQUIRE(p->request.inputs.size() == 2);
  CHECK(p->request.inputs[1].name == "bx");
  CHECK(Floats(p->request.inputs[1].bytes) == std::vector<float>{0.5f, -1, 2, 3});
  // A later "binary_data_output" still sets the outputs' default.
  REQUIRE(p->outputs.size() == 1);
  CHECK(p->outputs[0].binary);
  // An unknown field a million arrays deep is skipped without recursion.
  std::string deep = R"({"x":)" + std::string(1'000'000, '[') + std::string(1'000'000, ']') +
                     R"(,"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]})";
  CHECK(ParseInferRequest(deep, "").ok());
  std::string unclosed = R"({"x":)" + std::string(1'000'000, '[') +
                         R"(,"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]})";
  CHECK_FALSE(ParseInferRequest(unclosed, "").ok());
  // An id longer than kept is cut at a character boundary ("é" is two bytes).
  std::string id;
  for (int i = 0; i < 200; ++i) {
    id += "\u00e9";
  }
  p = ParseInferRequest(
      R"({"id":")" + id + R"(","inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]})",
      "");
  REQUIRE(p.ok());
  CHECK(p->id.size() == 256);
}

TEST_CASE("responses are valid JSON whatever the strings; floats in their shortest form") {
  hookhost::InferResponse response;
  hookhost::ResponseTensor y{"y\"\n\xff", DType::kF32, {4}, std::vector<uint8_t>(16)};
  float v[4] = {0.1f, 1e-7f, 3.4028235e38f, std::numeric_limits<float>::quiet_NaN()};
  std::memcpy(y.bytes.data(), v, 16);
  response.outputs.push_back(y);
  hookhost::ResponseTensor b{"b", DType::kBool, {2}, std::vector<uint8_t>{1, 0}};
  response.outputs.push_back(b);
  hookhost::ResponseTensor i{"i", DType::kI64, {1}, std::vector<uint8_t>(8)};
  int64_t min = std::numeric_limits<int64_t>::min();
  std::memcpy(i.bytes.data(), &min, 8);
  response.outputs.push_back(i);
  ParsedInfer request;
  request.id = std::string("q\x01\\", 3);
  Result<EncodedResponse> e = EncodeInferResponse("m", 1, request, response);
  REQUIRE(e.ok());
  CHECK(e->body.find("[0.1,1e-07,3.4028235e+38,null]") != std::string::npos);
  json doc = json::parse(e->body);  // Throws on invalid JSON.
  CHECK(doc["id"] == std::string("q\x01\\", 3));
  CHECK(doc["outputs"][0]["name"] == "y\"\n\uFFFD");
  CHECK(doc["outputs"][1]["data"] == json::array({true, false}));
  CHECK(doc["outputs"][2]["data"][0] == min);
  CHECK(static_cast<float>(doc["outputs"][0]["data"][2].get<double>()) == v[2]);
  // A large integral float is written as one (scientific), not as a 21-digit integer.
  hookhost::ResponseTensor d{"d", DType::kF64, {2}, std::vector<uint8_t>(16)};
  double big[2] = {1.1844674407370955e20, 2};
  std::memcpy(d.bytes.data(), big, 16);
  response.outputs = {d};
  e = EncodeInferResponse("m", 1, request, response);
  REQUIRE(e.ok());
  CHECK(e->body.find("[1.1844674407370955e+20,2]") != std::string::npos);
}

TEST_CASE("nesting is counted outside strings only") {
  CHECK(JsonDepthWithin(R"({"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})", 2));
  CHECK(JsonDepthWithin(R"({"a":"\"[[[["})", 1));
  CHECK_FALSE(JsonDepthWithin("[[[", 2));
}

TEST_CASE("responses: JSON by default, binary when asked, timings as parameters") {
  hookhost::InferResponse response;
  hookhost::ResponseTensor y{"y", DType::kF32, {1, 2}, std::vector<uint8_t>(8)};
  float v[2] = {0.5f, -2};
  std::memcpy(y.bytes.data(), v, 8);
  response.outputs.push_back(y);
  response.timings.compute_ns = 7000;
  response.timings.batch_size = 8;
  ParsedInfer request;
  request.id = "abc";
  Result<EncodedResponse> e = EncodeInferResponse("m", 1, request, response);
  REQUIRE(e.ok());
  CHECK_FALSE(e->binary);
  json doc = json::parse(e->body);
  CHECK(doc["id"] == "abc");
  CHECK(doc["model_name"] == "m");
  CHECK(doc["parameters"]["compute_us"] == 7);
  CHECK(doc["parameters"]["batch_size"] == 8);
  CHECK(doc["outputs"][0]["data"] == json::array({0.5, -2.0}));
  CHECK(doc["outputs"][0]["shape"] == json::array({1, 2}));

  request.binary_default = true;
  e = EncodeInferResponse("m", 1, request, response);
  REQUIRE(e.ok());
  CHECK(e->binary);
  json head = json::parse(e->body.substr(0, e->json_bytes));
  CHECK(head["outputs"][0]["parameters"]["binary_data_size"] == 8);
  CHECK(e->body.substr(e->json_bytes) == std::string(reinterpret_cast<char*>(v), 8));

  request.outputs = {{"nope", false}};
  CHECK(EncodeInferResponse("m", 1, request, response).error().message.find("no output 'nope'") !=
        std::string::npos);
}

TEST_CASE("metadata and config of the example MLP") {
  Result<Manifest> m = ParseManifest(
      "name = \"mlp\"\n[[inputs]]\nname = \"input\"\ndtype = \"FP32\"\nshape = [-1, 784]\n"
      "[[outputs]]\nname = \"logits\"\ndtype = \"FP32\"\nshape = [-1, 10]\n"
      "[batching]\nsizes = [1, 8, 32]\n[[program]]\nop = \"relu\"\ninput = \"input\"\n"
      "output = \"logits\"\n",
      "test");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  json meta = ModelMetadata(*m);
  CHECK(meta["inputs"][0]["shape"] == json::array({-1, 784}));
  CHECK(meta["inputs"][0]["datatype"] == "FP32");
  CHECK(meta["versions"][0] == "1");
  json config = ModelConfig(*m);
  CHECK(config["max_batch_size"] == 32);
  CHECK(config["input"][0]["dims"] == json::array({784}));
  CHECK(config["input"][0]["data_type"] == "TYPE_FP32");
  CHECK(ServerMetadata()["extensions"] ==
        json::array({"binary_tensor_data", "logging", "model_configuration", "model_repository",
                     "parameters", "statistics", "system_shared_memory", "trace"}));
  // A raw binary body is one row of the one input.
  std::string body(784 * 4, '\0');
  Result<ParsedInfer> raw = ParseRawInferRequest(*m, body);
  REQUIRE(raw.ok());
  CHECK(raw->request.inputs[0].shape == Shape{1, 784});
  CHECK(raw->binary_default);
}

TEST_CASE("a tenant named outside the body joins the parameter; both must agree") {
  ParsedInfer none;
  REQUIRE(MergeTenant(none, "acme", "Ferry-Tenant header").ok());
  CHECK(none.tenant == "acme");
  ParsedInfer same;
  same.tenant = "acme";
  CHECK(MergeTenant(same, "acme", "ferry-tenant metadata").ok());
  Status differ = MergeTenant(same, "globex", "ferry-tenant metadata");
  REQUIRE_FALSE(differ.ok());
  CHECK(differ.error().code == ErrorCode::kInvalidArgument);
  CHECK(differ.error().message.find("ferry-tenant metadata") != std::string::npos);
  CHECK(same.tenant == "acme");
  // A huge name is kept to its first bytes, as the parameter is: the two still agree.
  std::string huge(100'000, 't');
  Result<ParsedInfer> parsed = ParseInferRequest(
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"parameters":{"tenant":")" +
          huge + R"("}})",
      "");
  REQUIRE(parsed.ok());
  CHECK(parsed->tenant.size() == kMaxTenantNameBytes);
  CHECK(MergeTenant(*parsed, huge, "Ferry-Tenant header").ok());
  CHECK(parsed->tenant.size() == kMaxTenantNameBytes);
}

}  // namespace
}  // namespace ferry::frontend

namespace ferry::frontend {
namespace {

TEST_CASE("traceparent: W3C Trace Context's form accepted, anything else ignored") {
  const std::string valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  std::optional<TraceContext> t = ParseTraceparent(valid);
  REQUIRE(t.has_value());
  CHECK(t->trace_id_high == 0x4bf92f3577b34da6ULL);
  CHECK(t->trace_id_low == 0xa3ce929d0e0e4736ULL);
  CHECK(t->header == valid);
  // A later version may carry more after the flags; the echo is the version-00 form.
  std::optional<TraceContext> later = ParseTraceparent("cc" + valid.substr(2) + "-what-comes");
  REQUIRE(later.has_value());
  CHECK(later->header == valid);
  CHECK(ParseTraceparent("cc" + valid.substr(2)).has_value());
  auto with = [&](size_t at, char c) {
    std::string s = valid;
    s[at] = c;
    return s;
  };
  for (const std::string& bad : std::vector<std::string>{
           std::string(),
           valid.substr(0, 54),           // Truncated.
           valid + "-x",                  // Version 00 is exactly 55 characters.
           "cc" + valid.substr(2) + "x",  // A later version: '-' after the flags.
           "ff" + valid.substr(2),        // Version ff is invalid.
           with(3, 'A'),                  // Uppercase hex.
           with(40, 'g'),                 // Not hex.
           with(2, '_'),
           with(35, '_'),
           with(52, '_'),  // Separators.
           with(0, '+'),
           with(53, ' '),
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // Trace id all zeros.
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // Parent id all zeros.
           std::string(100'000, '-'),
       }) {
    CAPTURE(bad.substr(0, 64));
    CHECK_FALSE(ParseTraceparent(bad).has_value());
  }
}

}  // namespace
}  // namespace ferry::frontend
