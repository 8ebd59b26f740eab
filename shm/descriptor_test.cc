#include "shm/descriptor.h"

#include <doctest/doctest.h>

namespace ferry::shm {
namespace {

DescriptorRules Rules() {
  DescriptorRules rules;
  rules.request_slot = 1;
  rules.num_models = 4;
  rules.allowed_partitions = {1};
  rules.partition_bytes = 1 << 20;
  return rules;
}

DescriptorData Good() {
  DescriptorData d{};
  d.kind = static_cast<uint16_t>(DescriptorKind::kSubmit);
  d.slot = 1;
  d.sequence = 9;
  d.model = 3;
  d.rows = 2;
  d.num_tensors = 1;
  int64_t shape[] = {2, 784};
  d.tensors[0] = MakeTensorRef(1, 4096, 2 * 784 * 4, DType::kF32, shape);
  return d;
}

std::string ErrorOf(const DescriptorData& d) {
  Status s = ValidateDescriptor(d, Rules());
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == ErrorCode::kInvalidArgument);
  return s.error().message;
}

TEST_CASE("a well-formed submission passes") { CHECK(ValidateDescriptor(Good(), Rules()).ok()); }

TEST_CASE("each hostile field is named") {
  DescriptorData d = Good();
  d.kind = 77;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: unknown kind 77");
  d = Good();
  d.kind = static_cast<uint16_t>(DescriptorKind::kCompletion);
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: kind 2 does not belong on this ring");
  d = Good();
  d.num_tensors = 0;
  CHECK(ErrorOf(d).find("a submission names no tensor") != std::string::npos);
  d = Good();
  d.slot = 0;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: claims slot 0");
  d = Good();
  d.num_tensors = 9;
  CHECK(ErrorOf(d).find("9 tensors, more than 8") != std::string::npos);
  d = Good();
  d.model = 4;
  CHECK(ErrorOf(d).find("model 4 out of range") != std::string::npos);
  d = Good();
  d.rows = 0;
  CHECK(ErrorOf(d).find("rows 0 out of range") != std::string::npos);
  d = Good();
  d.tensors[0].partition = 0;
  CHECK(ErrorOf(d).find("tensor 0: partition 0 is not the sender's") != std::string::npos);
  d = Good();
  d.tensors[0].dtype = 200;
  CHECK(ErrorOf(d).find("unknown dtype 200") != std::string::npos);
  d = Good();
  d.tensors[0].rank = 9;
  CHECK(ErrorOf(d).find("rank 9 exceeds 8") != std::string::npos);
  d = Good();
  d.tensors[0].shape[1] = -784;
  CHECK(ErrorOf(d).find("dimension 1 is -784") != std::string::npos);
  d = Good();
  d.tensors[0].bytes += 4;
  CHECK(ErrorOf(d).find("need 6272 bytes but the descriptor says 6276") != std::string::npos);
  d = Good();
  d.tensors[0].offset = 4097;
  CHECK(ErrorOf(d).find("not 256-byte aligned") != std::string::npos);
  d = Good();
  d.tensors[0].offset = (1 << 20) - 256;
  CHECK(ErrorOf(d).find("exceeds the partition's 1048576") != std::string::npos);
  d = Good();
  d.tensors[0].offset = UINT64_MAX - 255;
  CHECK(ErrorOf(d).find("exceeds the partition") != std::string::npos);  // No wrap-around.
  d = Good();
  d.tensors[0].shape[0] = int64_t{1} << 40;
  d.tensors[0].shape[1] = int64_t{1} << 40;
  CHECK(ErrorOf(d).find("overflows") != std::string::npos);
}

TEST_CASE("random bytes are rejected or describe memory inside the partition") {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state;
  };
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    DescriptorData d = Good();
    uint8_t* bytes = reinterpret_cast<uint8_t*>(&d);
    for (int k = 0; k < 4; ++k) {  // Flip a few random bytes of a good descriptor.
      bytes[next() % sizeof(d)] = static_cast<uint8_t>(next());
    }
    if (ValidateDescriptor(d, Rules()).ok()) {
      ++accepted;
      for (uint32_t t = 0; t < d.num_tensors; ++t) {
        REQUIRE(d.tensors[t].offset + d.tensors[t].bytes <= Rules().partition_bytes);
      }
    }
  }
  CHECK(accepted > 0);  // Flips in padding or unused tensors are harmless.
}

}  // namespace
}  // namespace ferry::shm
