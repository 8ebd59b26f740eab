// The gRPC request parser (ParseGrpcInfer) against the protocol's rules and hostile messages:
// typed contents of every datatype converted and range-checked, raw contents matched to their
// inputs, and every malformed request refused naming the tensor and what was expected.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>

#include "hookhost/frontend/grpc_service.h"

namespace ferry::frontend {
namespace {

using inference::ModelInferRequest;

ModelInferRequest::InferInputTensor* AddInput(ModelInferRequest& r, const std::string& name,
                                              const std::string& datatype, Shape shape) {
  ModelInferRequest::InferInputTensor* in = r.add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) {
    in->add_shape(d);
  }
  return in;
}

template <typename T>
std::vector<T> Values(std::span<const uint8_t> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

std::string ErrorOf(const ModelInferRequest& r) {
  Result<ParsedInfer> p = ParseGrpcInfer(r);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().code == ErrorCode::kInvalidArgument);
  return p.error().message;
}

TEST_CASE("typed contents: every datatype converted to its bytes, in input order") {
  ModelInferRequest r;
  r.set_id("g1");
  auto* f = AddInput(r, "f", "FP32", {2, 2})->mutable_contents();
  for (float v : {1.0f, -2.5f, 3.0f, 1e30f}) f->add_fp32_contents(v);
  auto* d = AddInput(r, "d", "FP64", {2})->mutable_contents();
  d->add_fp64_contents(0.125);
  d->add_fp64_contents(-1e300);
  auto* i8 = AddInput(r, "i8", "INT8", {2})->mutable_contents();
  i8->add_int_contents(-128);
  i8->add_int_contents(127);
  auto* i32 = AddInput(r, "i32", "INT32", {1})->mutable_contents();
  i32->add_int_contents(std::numeric_limits<int32_t>::min());
  auto* u16 = AddInput(r, "u16", "UINT16", {1})->mutable_contents();
  u16->add_uint_contents(65535);
  auto* i64 = AddInput(r, "i64", "INT64", {1})->mutable_contents();
  i64->add_int64_contents(std::numeric_limits<int64_t>::min());
  auto* u64 = AddInput(r, "u64", "UINT64", {1})->mutable_contents();
  u64->add_uint64_contents(std::numeric_limits<uint64_t>::max());
  auto* b = AddInput(r, "b", "BOOL", {3})->mutable_contents();
  for (bool v : {true, false, true}) b->add_bool_contents(v);
  Result<ParsedInfer> p = ParseGrpcInfer(r);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->id == "g1");
  const auto& in = p->request.inputs;
  REQUIRE(in.size() == 8);
  CHECK(in[0].name == "f");
  CHECK(in[0].dtype == DType::kF32);
  CHECK(in[0].shape == Shape{2, 2});
  CHECK(Values<float>(in[0].bytes) == std::vector<float>{1.0f, -2.5f, 3.0f, 1e30f});
  CHECK(Values<double>(in[1].bytes) == std::vector<double>{0.125, -1e300});
  CHECK(Values<int8_t>(in[2].bytes) == std::vector<int8_t>{-128, 127});
  CHECK(Values<int32_t>(in[3].bytes) == std::vector<int32_t>{std::numeric_limits<int32_t>::min()});
  CHECK(Values<uint16_t>(in[4].bytes) == std::vector<uint16_t>{65535});
  CHECK(Values<int64_t>(in[5].bytes) == std::vector<int64_t>{std::numeric_limits<int64_t>::min()});
  CHECK(Values<uint64_t>(in[6].bytes) ==
        std::vector<uint64_t>{std::numeric_limits<uint64_t>::max()});
  CHECK(Values<uint8_t>(in[7].bytes) == std::vector<uint8_t>{1, 0, 1});
}

TEST_CASE("raw contents: one entry per input, each exactly the size shape and datatype make") {
  ModelInferRequest r;
  AddInput(r, "x", "FP32", {1, 3});
  AddInput(r, "y", "INT16", {2});
  std::string x(12, '\x01'), y(4, '\x02');
  r.add_raw_input_contents(x);
  r.add_raw_input_contents(y);
  r.add_outputs()->set_name("logits");
  Result<ParsedInfer> p = ParseGrpcInfer(r);
  REQUIRE(p.ok());
  REQUIRE(p->request.inputs.size() == 2);
  CHECK(p->request.inputs[0].bytes.size() == 12);
  CHECK(p->request.inputs[1].bytes.size() == 4);
  CHECK(p->request.inputs[1].bytes[0] == 2);
  REQUIRE(p->outputs.size() == 1);
  CHECK(p->outputs[0].name == "logits");

  SUBCASE("a size that disagrees with the shape is refused, naming both") {
    r.set_raw_input_contents(1, std::string(5, '\0'));
    std::string e = ErrorOf(r);
    CHECK(e.find("input 'y'") != std::string::npos);
    CHECK(e.find("holds 5 bytes but shape and datatype make 4") != std::string::npos);
  }
  SUBCASE("fewer entries than inputs") {
    r.mutable_raw_input_contents()->RemoveLast();
    CHECK(ErrorOf(r).find("raw_input_contents has 1 entries for 2 inputs") != std::string::npos);
  }
  SUBCASE("both raw and typed contents for one input") {
    r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
    CHECK(ErrorOf(r).find("input 'x': both contents and raw_input_contents") != std::string::npos);
  }
}

TEST_CASE("BYTES: bytes_contents serialized; raw contents checked element by element") {
  ModelInferRequest typed;
  auto* in = AddInput(typed, "text", "BYTES", {1, 2});
  in->mutable_contents()->add_bytes_contents("hi");
  in->mutable_contents()->add_bytes_contents(std::string("\0x", 2));
  Result<ParsedInfer> p = ParseGrpcInfer(typed);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  std::span<const uint8_t> got = p->request.inputs[0].bytes;
  CHECK(std::string(got.begin(), got.end()) == std::string("\2\0\0\0hi\2\0\0\0\0x", 12));
  CHECK(p->request.inputs[0].dtype == DType::kBytes);

  in->mutable_contents()->add_bytes_contents("extra");
  CHECK(ErrorOf(typed).find("shape holds 2 elements but bytes_contents has 3") !=
        std::string::npos);

  ModelInferRequest raw;
  AddInput(raw, "text", "BYTES", {2});
  raw.add_raw_input_contents(std::string("\1\0\0\0a\0\0\0\0", 9));
  p = ParseGrpcInfer(raw);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  CHECK(p->request.inputs[0].bytes.size() == 9);
  raw.set_raw_input_contents(0, std::string("\1\0\0\0a\7\0\0\0", 9));
  CHECK(ErrorOf(raw).find("claims 7 bytes") != std::string::npos);
  raw.set_raw_input_contents(0, std::string("\1\0\0\0a\0\0\0\0zz", 11));
  CHECK(ErrorOf(raw).find("after its 2 elements") != std::string::npos);
  raw.set_raw_input_contents(0, std::string("\1\0", 2));
  CHECK(ErrorOf(raw).find("ends before its length") != std::string::npos);
}

TEST_CASE("typed contents that lie about their count or range are refused, not wrapped") {
  ModelInferRequest r;
  SUBCASE("fewer values than the shape holds") {
    auto* c = AddInput(r, "x", "FP32", {2, 2})->mutable_contents();
    c->add_fp32_contents(1.0f);
    CHECK(ErrorOf(r).find("input 'x': its shape holds 4 elements but its contents have 1") !=
          std::string::npos);
  }
  SUBCASE("no contents at all") {
    AddInput(r, "x", "FP32", {3});
    CHECK(ErrorOf(r).find("holds 3 elements but its contents have 0") != std::string::npos);
  }
  SUBCASE("values in the wrong field") {
    auto* c = AddInput(r, "x", "INT32", {1})->mutable_contents();
    c->add_fp32_contents(1.0f);
    CHECK(ErrorOf(r).find("its contents have 0") != std::string::npos);
  }
  SUBCASE("an INT8 value outside -128..127") {
    AddInput(r, "x", "INT8", {1})->mutable_contents()->add_int_contents(128);
    CHECK(ErrorOf(r).find("input 'x': a value is out of its datatype's range") !=
          std::string::npos);
  }
  SUBCASE("a UINT8 value above 255") {
    AddInput(r, "x", "UINT8", {1})->mutable_contents()->add_uint_contents(256);
    CHECK(ErrorOf(r).find("out of its datatype's range") != std::string::npos);
  }
  SUBCASE("FP16 has no typed field: it must be raw") {
    AddInput(r, "x", "FP16", {1});
    CHECK(ErrorOf(r).find("FP16 tensors must be sent as raw_input_contents") != std::string::npos);
  }
}

TEST_CASE("hostile shapes, datatypes, input counts and parameters are refused") {
  ModelInferRequest r;
  SUBCASE("no inputs") { CHECK(ErrorOf(r).find("1 to 64 inputs, got 0") != std::string::npos); }
  SUBCASE("65 inputs") {
    for (int i = 0; i < 65; ++i) {
      AddInput(r, "x" + std::to_string(i), "FP32", {1})->mutable_contents()->add_fp32_contents(0);
    }
    CHECK(ErrorOf(r).find("got 65") != std::string::npos);
  }
  SUBCASE("an unknown datatype, its name truncated") {
    AddInput(r, "x", std::string(1000, 'Q'), {1});
    std::string e = ErrorOf(r);
    CHECK(e.find("input 'x': unsupported datatype") != std::string::npos);
    CHECK(e.size() < 200);
  }
  SUBCASE("a negative dim") {
    AddInput(r, "x", "FP32", {2, -1});
    CHECK(ErrorOf(r).find("input 'x': shape dims must be >= 0") != std::string::npos);
  }
  SUBCASE("17 dims") {
    AddInput(r, "x", "FP32", Shape(17, 1));
    CHECK(ErrorOf(r).find("more than 16 dims") != std::string::npos);
  }
  SUBCASE("dims whose product overflows, or is past a terabyte, allocate nothing") {
    AddInput(r, "x", "FP32", {std::numeric_limits<int64_t>::max(), 4});
    CHECK(ErrorOf(r).find("input 'x': shape too large") != std::string::npos);
    r.mutable_inputs(0)->set_shape(0, int64_t{1} << 20);
    r.mutable_inputs(0)->set_shape(1, int64_t{1} << 20);
    CHECK(ErrorOf(r).find("shape too large") != std::string::npos);
  }
  SUBCASE("a long tensor name is cut to 256 bytes in the error") {
    AddInput(r, std::string(100'000, 'n'), "FP32", {-1});
    CHECK(ErrorOf(r).size() < 400);
  }
  SUBCASE("parameters of the wrong type or range") {
    AddInput(r, "x", "FP32", {1})->mutable_contents()->add_fp32_contents(0);
    SUBCASE("timeout negative") {
      (*r.mutable_parameters())["timeout"].set_int64_param(-1);
      CHECK(ErrorOf(r).find("\"timeout\" must be >= 0") != std::string::npos);
    }
    SUBCASE("timeout as a string") {
      (*r.mutable_parameters())["timeout"].set_string_param("5");
      CHECK(ErrorOf(r).find("\"timeout\" must be an integer") != std::string::npos);
    }
    SUBCASE("timeout as a uint64 past INT64_MAX") {
      (*r.mutable_parameters())["timeout"].set_uint64_param(std::numeric_limits<uint64_t>::max());
      CHECK(ErrorOf(r).find("\"timeout\" must be an integer") != std::string::npos);
    }
    SUBCASE("priority as a bool") {
      (*r.mutable_parameters())["priority"].set_bool_param(true);
      CHECK(ErrorOf(r).find("\"priority\" must be an integer") != std::string::npos);
    }
    SUBCASE("tenant as a number") {
      (*r.mutable_parameters())["tenant"].set_int64_param(3);
      CHECK(ErrorOf(r).find("\"tenant\" must be a string") != std::string::npos);
    }
    SUBCASE("well-typed parameters are carried") {
      (*r.mutable_parameters())["timeout"].set_uint64_param(2500);
      (*r.mutable_parameters())["priority"].set_int64_param(1);
      (*r.mutable_parameters())["tenant"].set_string_param(std::string(1000, 't'));
      Result<ParsedInfer> p = ParseGrpcInfer(r);
      REQUIRE(p.ok());
      CHECK(p->timeout_us == 2500);
      CHECK(p->priority == 1);
      CHECK(p->tenant.size() == kMaxTenantNameBytes);  // Truncated, never grown.
    }
  }
}

TEST_CASE("shared-memory places: raw contents are the other inputs' in order") {
  ModelInferRequest r;
  auto place = [](ModelInferRequest::InferInputTensor* in, const char* region, int64_t size) {
    (*in->mutable_parameters())["shared_memory_region"].set_string_param(region);
    (*in->mutable_parameters())["shared_memory_byte_size"].set_int64_param(size);
  };
  place(AddInput(r, "a", "FP32", {1, 2}), "in", 8);
  AddInput(r, "b", "FP32", {1});
  float b = 3;
  r.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&b), 4));
  auto* out = r.add_outputs();
  out->set_name("y");
  (*out->mutable_parameters())["shared_memory_region"].set_string_param("out");
  (*out->mutable_parameters())["shared_memory_byte_size"].set_uint64_param(40);
  Result<ParsedInfer> p = ParseGrpcInfer(r);
  REQUIRE(p.ok());
  REQUIRE(p->shm_inputs.size() == 1);
  CHECK(p->shm_inputs[0].first == 0);
  CHECK(Values<float>(p->request.inputs[1].bytes) == std::vector<float>{3});
  REQUIRE(p->outputs[0].shm.has_value());
  CHECK(p->outputs[0].shm->byte_size == 40);
  // Raw contents for every input although one is in shared memory: refused.
  r.add_raw_input_contents(std::string(8, '\0'));
  CHECK(ErrorOf(r).find("inputs not in shared memory") != std::string::npos);
  ModelInferRequest wrong;
  place(AddInput(wrong, "a", "FP32", {1, 2}), "in", 4);
  CHECK(ErrorOf(wrong).find("make 8 bytes") != std::string::npos);
  ModelInferRequest unnamed;
  place(AddInput(unnamed, "a", "FP32", {1, 2}), "", 8);
  CHECK(ErrorOf(unnamed).find("not a region's name") != std::string::npos);
  ModelInferRequest many;
  AddInput(many, "a", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  for (int i = 0; i < 65; ++i) {
    many.add_outputs()->set_name("y");
  }
  CHECK(ErrorOf(many).find("at most 64 outputs") != std::string::npos);
}

TEST_CASE("a sequence's id and flags are read; a string id, a negative one refused") {
  ModelInferRequest r;
  AddInput(r, "a", "FP32", {1})->mutable_contents()->add_fp32_contents(1);
  CHECK(ParseGrpcInfer(r)->request.sequence_id == 0);
  (*r.mutable_parameters())["sequence_id"].set_int64_param(0);
  (*r.mutable_parameters())["sequence_end"].set_bool_param(false);
  CHECK(ParseGrpcInfer(r).ok());  // Zero and false: no sequence.
  (*r.mutable_parameters())["sequence_id"].set_uint64_param(UINT64_MAX);
  (*r.mutable_parameters())["sequence_start"].set_bool_param(true);
  Result<ParsedInfer> p = ParseGrpcInfer(r);
  REQUIRE(p.ok());
  CHECK(p->request.sequence_id == UINT64_MAX);
  CHECK(p->request.sequence_start);
  CHECK_FALSE(p->request.sequence_end);
  (*r.mutable_parameters())["sequence_id"].set_int64_param(9);
  CHECK(ParseGrpcInfer(r)->request.sequence_id == 9);
  (*r.mutable_parameters())["sequence_id"].set_int64_param(-9);
  CHECK(ErrorOf(r).find(">= 0") != std::string::npos);
  (*r.mutable_parameters())["sequence_id"].set_string_param("corr-1");
  CHECK(ErrorOf(r) == kSequenceIdText);
  (*r.mutable_parameters())["sequence_id"].set_string_param("");
  CHECK(ParseGrpcInfer(r)->request.sequence_id == 0);
  (*r.mutable_parameters())["sequence_id"].set_bool_param(true);
  CHECK(ErrorOf(r).find("unsigned integer") != std::string::npos);
  (*r.mutable_parameters())["sequence_id"].set_int64_param(3);
  (*r.mutable_parameters())["sequence_end"].set_int64_param(1);
  CHECK(ErrorOf(r).find("boolean") != std::string::npos);
}

}  // namespace
}  // namespace ferry::frontend
