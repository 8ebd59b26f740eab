// libFuzzer target: the shared-memory descriptor validator on arbitrary bytes. An accepted
// descriptor must describe only memory inside the partition it names, which the target
// checks by touching every byte through TensorBytes on a real (small) segment.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "shm/descriptor.h"

namespace {

const ferry::shm::Segment& FuzzSegment() {
  static const std::string name = "ferry-fuzz-" + std::to_string(::getpid());
  static ferry::shm::Segment segment = [] {
    ferry::Result<ferry::shm::Segment> s = ferry::shm::Segment::Create(name, {1, 1, 4, 1 << 20});
    if (!s.ok()) {
      std::abort();
    }
    ferry::shm::Segment::Remove(name);  // The mapping stays; nothing is left in /dev/shm.
    return std::move(s).value();
  }();
  return segment;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ferry::shm::Segment& segment = FuzzSegment();
  ferry::shm::DescriptorData d{};
  std::memcpy(&d, data, std::min(size, sizeof(d)));
  ferry::shm::DescriptorRules rules{0, 4, {0, 1}, segment.partition_bytes()};
  if (ferry::shm::ValidateDescriptor(d, rules).ok()) {
    // What the consumers index with must be in range.
    bool submit = d.kind == static_cast<uint16_t>(ferry::shm::DescriptorKind::kSubmit);
    bool cancel = d.kind == static_cast<uint16_t>(ferry::shm::DescriptorKind::kCancel);
    if ((submit && (d.priority > ferry::shm::kMaxPriority || d.tenant > ferry::shm::kMaxTenants ||
                    d.model >= rules.num_models)) ||
        (cancel && (d.num_tensors != 0 || d.model >= rules.num_models))) {
      std::abort();
    }
    volatile uint8_t sink = 0;
    for (uint32_t i = 0; i < d.num_tensors; ++i) {
      std::span<uint8_t> bytes = ferry::shm::TensorBytes(segment, d.tensors[i]);
      if (!bytes.empty()) {
        sink = sink + bytes.front() + bytes.back();  // ASan catches any out-of-bounds.
      }
    }
  }
  return 0;
}
