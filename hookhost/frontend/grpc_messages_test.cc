// PeekInferHeader against well-formed and hostile messages: the model, version and id read
// wherever they are among the top-level fields, the tensors skipped; truncated bytes, lengths
// that lie, values past the bound, wire types that do not exist and strings that are not UTF-8
// leave the header empty of what could not be read, and nothing is read past the bytes.
#include "hookhost/frontend/grpc_messages.h"

#include <doctest/doctest.h>

#include <string>

namespace ferry::frontend {
namespace {

using inference::ModelInferRequest;

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

ModelInferRequest Peek(const std::string& s) {
  ModelInferRequest header;
  header.set_id("stale");  // Cleared by the peek.
  PeekInferHeader(Bytes(s), &header);
  return header;
}

// A request whose tensors come before its id (field order is free in protobuf).
std::string Large() {
  ModelInferRequest r;
  r.set_model_name("mlp");
  r.set_model_version("2");
  r.add_inputs()->set_name("input");
  r.add_raw_input_contents(std::string(1 << 20, 'x'));
  std::string bytes = r.SerializeAsString();
  ModelInferRequest tail;
  tail.set_id("req-7");
  return bytes + tail.SerializeAsString();
}

TEST_CASE("the model, version and id are read past tensors, which are skipped") {
  ModelInferRequest h = Peek(Large());
  CHECK(h.model_name() == "mlp");
  CHECK(h.model_version() == "2");
  CHECK(h.id() == "req-7");
  CHECK(h.inputs_size() == 0);  // Nothing else is kept.
  CHECK(h.raw_input_contents_size() == 0);
}

TEST_CASE("the bytes spread over several slices read the same") {
  std::string s = Large();
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < s.size(); at += 7919) {
    slices.emplace_back(s.substr(at, 7919));
  }
  grpc::ByteBuffer bytes(slices.data(), slices.size());
  ModelInferRequest h;
  PeekInferHeader(bytes, &h);
  CHECK(h.model_name() == "mlp");
  CHECK(h.id() == "req-7");
}

TEST_CASE("truncated bytes keep what came before the cut") {
  std::string s = Large();
  ModelInferRequest h = Peek(s.substr(0, s.size() / 2));  // Cut inside the tensor's bytes.
  CHECK(h.model_name() == "mlp");
  CHECK(h.id().empty());
  CHECK(Peek(s.substr(0, 3)).model_name().empty());  // Cut inside the name.
  CHECK(Peek("").model_name().empty());
}

TEST_CASE("a length that lies, a wire type that does not exist: the scan stops there") {
  ModelInferRequest first;
  first.set_model_name("mlp");
  std::string lead = first.SerializeAsString();
  // Field 6 (raw_input_contents) claiming 2 GiB - 1 bytes, then an id never reached.
  std::string lying = lead + std::string("\x32\xff\xff\xff\xff\x07", 6) + "\x1a\x01z";
  ModelInferRequest h = Peek(lying);
  CHECK(h.model_name() == "mlp");
  CHECK(h.id().empty());
  // A length varint of 10 bytes (more than 32 bits).
  h = Peek(lead + std::string("\x32\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11));
  CHECK(h.model_name() == "mlp");
  // Wire types 6 and 7 do not exist; 3 (a group) is not in this message.
  for (char tag : {'\x0e', '\x0f', '\x0b'}) {
    h = Peek(lead + std::string(1, tag) + "\x1a\x01z");
    CHECK(h.model_name() == "mlp");
    CHECK(h.id().empty());
  }
}

TEST_CASE("a value past the bound is skipped; fields past the count are not read") {
  ModelInferRequest r;
  r.set_model_name(std::string(kMaxPeekValue + 1, 'm'));
  r.set_id("kept");
  ModelInferRequest h = Peek(r.SerializeAsString());
  CHECK(h.model_name().empty());
  CHECK(h.id() == "kept");
  ModelInferRequest many;
  for (int i = 0; i < kMaxPeekFields; ++i) {
    many.add_outputs()->set_name("o");
  }
  ModelInferRequest id;
  id.set_id("late");
  CHECK(Peek(many.SerializeAsString() + id.SerializeAsString()).id().empty());
  many.mutable_outputs()->RemoveLast();
  CHECK(Peek(many.SerializeAsString() + id.SerializeAsString()).id() == "late");
}

TEST_CASE("a name that is not UTF-8 leaves the header empty, as parsing would") {
  std::string bad = std::string("\x0a\x02\xc3\x28", 4);  // model_name: an invalid sequence.
  ModelInferRequest h = Peek(bad + "\x1a\x02ok");
  CHECK(h.model_name().empty());
  CHECK(h.id().empty());
  // Repeated fields: the last one wins, as when parsing.
  ModelInferRequest last = Peek(
      "\x1a\x01"
      "a"
      "\x1a\x01"
      "b");
  CHECK(last.id() == "b");
}

}  // namespace
}  // namespace ferry::frontend
