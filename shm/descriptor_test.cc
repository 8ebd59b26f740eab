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
  CHECK(ErrorOf(d) ==
        "descriptor from slot 1 seq 9: tensor 0: offset 4097 is not 256-byte aligned");
  d = Good();
  d.tensors[0].offset = (1 << 20) - 256;
  CHECK(ErrorOf(d) ==
        "descriptor from slot 1 seq 9: tensor 0: offset 1048320 + 6272 bytes exceeds the "
        "partition's 1048576");
  d = Good();
  d.tensors[0].offset = UINT64_MAX - 255;
  CHECK(ErrorOf(d).find("exceeds the partition") != std::string::npos);  // No wrap-around.
  d = Good();
  d.tensors[0].shape[0] = int64_t{1} << 40;
  d.tensors[0].shape[1] = int64_t{1} << 40;
  CHECK(ErrorOf(d).find("overflows") != std::string::npos);
}

bool Valid(const DescriptorData& d) { return ValidateDescriptor(d, Rules()).ok(); }

TEST_CASE("every limit holds at its boundary: the largest accepted, the smallest refused") {
  DescriptorData d = Good();
  d.rows = static_cast<int32_t>(kMaxRowsPerRequest);
  CHECK(Valid(d));
  d.rows = static_cast<int32_t>(kMaxRowsPerRequest + 1);
  CHECK(ErrorOf(d).find("out of range") != std::string::npos);
  d = Good();
  d.model = 3;  // The last of four.
  CHECK(Valid(d));
  d = Good();
  d.variant = -1;  // "Any": the worker chooses.
  CHECK(Valid(d));
  d.variant = -2;
  CHECK(ErrorOf(d).find("variant -2 out of range") != std::string::npos);
  d = Good();
  d.deadline_ns = 0;
  CHECK(Valid(d));
  d.deadline_ns = -1;
  CHECK(ErrorOf(d).find("negative deadline") != std::string::npos);
  d = Good();
  d.kind = 0;  // Below the first kind.
  CHECK(ErrorOf(d).find("unknown kind 0") != std::string::npos);
  d.kind = static_cast<uint16_t>(DescriptorKind::kCancel) + 1;
  CHECK(ErrorOf(d).find("unknown kind") != std::string::npos);
  // A known kind: refused only because this ring does not take it.
  d.kind = static_cast<uint16_t>(DescriptorKind::kControl);
  CHECK(ErrorOf(d).find("does not belong on this ring") != std::string::npos);
  DescriptorRules control = Rules();
  control.allowed_kinds = KindBit(DescriptorKind::kControl);
  d.num_tensors = 0;
  CHECK(ValidateDescriptor(d, control).ok());

  // Eight tensors, every one checked (a hostile last one is caught, not only the first).
  d = Good();
  d.num_tensors = kMaxTensors;
  for (uint32_t i = 0; i < kMaxTensors; ++i) {
    d.tensors[i] = d.tensors[0];
    d.tensors[i].offset = 4096 + i * 8192;
  }
  CHECK(Valid(d));
  for (uint32_t i = 1; i < kMaxTensors; ++i) {
    CAPTURE(i);
    DescriptorData bad = d;
    bad.tensors[i].partition = 0;
    CHECK(ErrorOf(bad).find("tensor " + std::to_string(i) + ": partition 0") != std::string::npos);
    bad = d;
    bad.tensors[i].bytes += 1;
    CHECK(ErrorOf(bad).find("tensor " + std::to_string(i) + ":") != std::string::npos);
    bad = d;
    bad.tensors[i].offset = 1 << 20;
    CHECK(ErrorOf(bad).find("exceeds the partition") != std::string::npos);
  }

  // A tensor may end exactly at the partition's end, not a byte later.
  d = Good();
  int64_t shape_full[] = {8, 8};  // 8 x 8 x 4 = 256 bytes.
  d.rows = 8;
  d.tensors[0] = MakeTensorRef(1, (1 << 20) - 256, 256, DType::kF32, shape_full);
  CHECK(Valid(d));
  d.tensors[0].offset += 256;
  CHECK(ErrorOf(d).find("exceeds the partition") != std::string::npos);

  // Rank 8 is accepted, 9 refused (in each-hostile-field); dimensions up to 2^40.
  d = Good();
  int64_t rank8[] = {1, 1, 1, 1, 1, 1, 2, 784};
  d.tensors[0] = MakeTensorRef(1, 4096, 2 * 784 * 4, DType::kF32, rank8);
  CHECK(Valid(d));
  d = Good();
  int64_t huge[] = {int64_t{1} << 40};
  d.tensors[0] = MakeTensorRef(1, 0, 0, DType::kU8, huge);
  d.tensors[0].bytes = uint64_t{1} << 40;
  CHECK(ErrorOf(d).find("exceeds the partition") != std::string::npos);  // Not the dimension.
  d.tensors[0].shape[0] = (int64_t{1} << 40) + 1;
  d.tensors[0].bytes += 1;
  CHECK(ErrorOf(d).find("dimension 0 is") != std::string::npos);
  // A zero-element tensor is well formed (0 bytes).
  d = Good();
  int64_t empty[] = {0, 784};
  d.tensors[0] = MakeTensorRef(1, 4096, 0, DType::kF32, empty);
  CHECK(Valid(d));

  // The last dtype is known, the next is not; a packed type whose bits do not fill a byte is
  // refused even when the byte count rounds to the descriptor's.
  d = Good();
  int64_t pair[] = {2, 4};
  d.tensors[0] = MakeTensorRef(1, 4096, 2 * 4 * 8, DType::kC64, pair);
  CHECK(Valid(d));
  d.tensors[0].dtype = static_cast<uint16_t>(DType::kC64) + 1;
  CHECK(ErrorOf(d).find("unknown dtype") != std::string::npos);
  int64_t odd[] = {1, 3};  // 3 x 4 bits = 12 bits.
  d.tensors[0] = MakeTensorRef(1, 4096, 1, DType::kF4, odd);
  CHECK(ErrorOf(d).find("need") != std::string::npos);
  int64_t even[] = {1, 4};  // 16 bits = 2 bytes.
  d.tensors[0] = MakeTensorRef(1, 4096, 2, DType::kF4, even);
  CHECK(Valid(d));
}

TEST_CASE("a release or completion needs no tensor, and its tensors are checked the same") {
  DescriptorRules rules = Rules();
  rules.allowed_kinds = KindBit(DescriptorKind::kRelease) | KindBit(DescriptorKind::kCompletion);
  DescriptorData d = Good();
  d.kind = static_cast<uint16_t>(DescriptorKind::kRelease);
  d.num_tensors = 0;
  d.model = 99;  // Model and rows are not a release's business.
  d.rows = 0;
  CHECK(ValidateDescriptor(d, rules).ok());
  d.num_tensors = 1;
  d.tensors[0].offset = 100;
  CHECK_FALSE(ValidateDescriptor(d, rules).ok());
}

TEST_CASE("a cancel: a model in range, no tensor; a submission: priority, tenant, sequence") {
  DescriptorData d = Good();
  d.kind = static_cast<uint16_t>(DescriptorKind::kCancel);
  d.num_tensors = 0;
  CHECK(ValidateDescriptor(d, Rules()).ok());
  d.num_tensors = 1;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: a cancel names no tensor");
  d.num_tensors = 0;
  d.model = 4;
  CHECK(ErrorOf(d).find("model 4 out of range") != std::string::npos);
  d = Good();
  d.priority = kMaxPriority;
  CHECK(ValidateDescriptor(d, Rules()).ok());
  d.priority = kMaxPriority + 1;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: priority 4 out of range");
  d = Good();
  d.tenant = kMaxTenants;
  CHECK(ValidateDescriptor(d, Rules()).ok());
  d.tenant = kMaxTenants + 1;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: tenant 17 out of range");
  // A sequence's flags: start and end only, and only with an id.
  d = Good();
  d.sequence_id = 7;
  d.sequence_flags = kSequenceStart | kSequenceEnd;
  CHECK(ValidateDescriptor(d, Rules()).ok());
  d.sequence_flags = 4;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: sequence flags 4 out of range");
  d.sequence_id = 0;
  d.sequence_flags = kSequenceStart;
  CHECK(ErrorOf(d) == "descriptor from slot 1 seq 9: sequence flags 1 out of range");
  d = Good();
  d.kind = static_cast<uint16_t>(DescriptorKind::kCancel);
  d.num_tensors = 0;
  DescriptorRules completions = Rules();
  completions.allowed_kinds = kCompletionRingKinds;
  CHECK_FALSE(ValidateDescriptor(d, completions).ok());  // Only on submission rings.
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
      // An independent oracle: everything an accepted tensor says is consistent and inside.
      REQUIRE(d.num_tensors <= kMaxTensors);
      for (uint32_t t = 0; t < d.num_tensors; ++t) {
        const TensorRefData& ref = d.tensors[t];
        uint64_t end = 0;
        REQUIRE_FALSE(__builtin_add_overflow(ref.offset, ref.bytes, &end));
        REQUIRE(end <= Rules().partition_bytes);
        REQUIRE(ref.partition == 1);
        REQUIRE(ref.offset % 256 == 0);
        REQUIRE(ref.dtype <= static_cast<uint16_t>(DType::kC64));
        REQUIRE(ref.rank <= kMaxRank);
        unsigned __int128 bits = static_cast<unsigned>(DTypeBits(static_cast<DType>(ref.dtype)));
        for (uint16_t k = 0; k < ref.rank; ++k) {
          REQUIRE(ref.shape[k] >= 0);
          bits *= static_cast<uint64_t>(ref.shape[k]);
        }
        REQUIRE(bits == static_cast<unsigned __int128>(ref.bytes) * 8);
      }
    }
  }
  CHECK(accepted > 0);  // Flips in padding or unused tensors are harmless.
}

}  // namespace
}  // namespace ferry::shm
