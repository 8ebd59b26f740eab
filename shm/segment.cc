#include "shm/segment.h"

#include <boost/interprocess/shared_memory_object.hpp>
#include <new>

#include "shm/status.h"

namespace ferry::shm {
namespace bip = boost::interprocess;

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMinPartition = 64 << 10;

uint64_t RingStride(uint32_t capacity) {
  return AlignUp(sizeof(RingData), 64) + uint64_t{capacity} * sizeof(DescriptorData);
}

// Fills every offset of `h` for the layout; false when the partitions would be too small.
bool ComputeLayout(const SegmentLayout& layout, SegmentHeaderData* h) {
  uint32_t slots = layout.hookhosts + layout.workers;
  uint64_t rings = 2ull * layout.hookhosts * layout.workers + slots;
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->hookhosts = layout.hookhosts;
  h->workers = layout.workers;
  h->ring_capacity = layout.ring_capacity;
  h->total_bytes = layout.total_bytes;
  uint64_t offset = AlignUp(sizeof(SegmentHeaderData), 64);
  h->slots_offset = offset;
  offset = AlignUp(offset + slots * sizeof(SlotData), 64);
  h->doorbells_offset = offset;
  offset = AlignUp(offset + slots * sizeof(DoorbellData), 64);
  h->status_offset = offset;
  offset = AlignUp(offset + slots * sizeof(StatusData), 64);
  h->rings_offset = offset;
  h->ring_stride = RingStride(layout.ring_capacity);
  offset += rings * h->ring_stride;
  h->partitions_offset = AlignUp(offset, kPage);
  if (h->partitions_offset >= layout.total_bytes) {
    return false;
  }
  uint64_t per_slot = (layout.total_bytes - h->partitions_offset) / slots;
  h->partition_bytes = per_slot / kBlockAlignment * kBlockAlignment;
  return h->partition_bytes >= kMinPartition;
}

}  // namespace

Segment::Segment(std::string name, bip::mapped_region region)
    : name_(std::move(name)), region_(std::move(region)) {
  header_ = static_cast<SegmentHeaderData*>(region_.get_address());
}

namespace {

bool ValidRingCapacity(uint32_t capacity) {
  return capacity >= 2 && (capacity & (capacity - 1)) == 0 && capacity <= (1u << 20);
}

bool ValidSlotCounts(uint64_t hookhosts, uint64_t workers) {
  return hookhosts > 0 && workers > 0 && hookhosts + workers <= kMaxSlots;
}

}  // namespace

std::string Segment::NameForNode(std::string_view node_name) {
  return "ferry-" + std::string(node_name);
}

bool Segment::Remove(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

Result<Segment> Segment::Create(const std::string& name, const SegmentLayout& layout) {
  if (!ValidSlotCounts(layout.hookhosts, layout.workers)) {
    return InvalidArgument("shared memory: need 1 to " + std::to_string(kMaxSlots) +
                           " slots (hook hosts + workers), got " +
                           std::to_string(layout.hookhosts) + " + " +
                           std::to_string(layout.workers));
  }
  if (!ValidRingCapacity(layout.ring_capacity)) {
    return InvalidArgument("shared memory: ring capacity must be a power of two in [2, 2^20]");
  }
  SegmentHeaderData header{};
  if (!ComputeLayout(layout, &header)) {
    return InvalidArgument("shared memory: " + std::to_string(layout.total_bytes) +
                           " bytes leave less than 64 KiB per process partition for " +
                           std::to_string(layout.hookhosts + layout.workers) +
                           " processes; raise node.shm_size");
  }
  // A stale segment from a crashed run never blocks a new start.
  bip::shared_memory_object::remove(name.c_str());
  try {
    bip::permissions mode(0600);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, mode);
    object.truncate(static_cast<bip::offset_t>(layout.total_bytes));
    bip::mapped_region region(object, bip::read_write);
    Segment segment(name, std::move(region));
    segment.layout_ = header;
    uint8_t* base = segment.base();
    uint32_t slots = layout.hookhosts + layout.workers;
    for (uint32_t s = 0; s < slots; ++s) {
      SlotData* slot = new (base + header.slots_offset + s * sizeof(SlotData)) SlotData{};
      slot->generation.store(1, std::memory_order_relaxed);
      new (base + header.doorbells_offset + s * sizeof(DoorbellData)) DoorbellData{};
      new (base + header.status_offset + s * sizeof(StatusData)) StatusData{};
    }
    // The header goes in before the rings so the ring helpers can find their offsets.
    new (base) SegmentHeaderData(header);
    for (uint32_t r = 0; r < segment.num_rings(); ++r) {
      RingData* ring = new (base + header.rings_offset + r * header.ring_stride) RingData{};
      ring->capacity = layout.ring_capacity;
    }
    for (uint32_t s = 0; s < slots; ++s) {
      segment.ring(segment.ControlRing(s)).producer_slot = kSupervisorProducer;
      segment.ring(segment.ControlRing(s)).consumer_slot = s;
    }
    for (uint32_t h = 0; h < layout.hookhosts; ++h) {
      for (uint32_t w = 0; w < layout.workers; ++w) {
        segment.ring(segment.SubmissionRing(h, w)).producer_slot = segment.HookhostSlot(h);
        segment.ring(segment.SubmissionRing(h, w)).consumer_slot = segment.WorkerSlot(w);
        segment.ring(segment.CompletionRing(w, h)).producer_slot = segment.WorkerSlot(w);
        segment.ring(segment.CompletionRing(w, h)).consumer_slot = segment.HookhostSlot(h);
      }
    }
    std::atomic_thread_fence(std::memory_order_release);
    return segment;
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    return Internal("shared memory: cannot create '" + name + "': " + e.what());
  }
}

Result<Segment> Segment::Attach(const std::string& name) {
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_write);
    bip::mapped_region region(object, bip::read_write);
    if (region.get_size() < sizeof(SegmentHeaderData)) {
      return InvalidArgument("shared memory '" + name + "': too small for a header");
    }
    Segment segment(name, std::move(region));
    const SegmentHeaderData h = *segment.header_;  // One read; checked, then trusted.
    if (h.magic != kMagic) {
      return InvalidArgument("shared memory '" + name + "': not a ferry segment (bad magic)");
    }
    if (h.layout_version != kLayoutVersion) {
      return InvalidArgument("shared memory '" + name + "': layout version " +
                             std::to_string(h.layout_version) + ", this build speaks " +
                             std::to_string(kLayoutVersion) + "; restart the node");
    }
    SegmentHeaderData expected{};
    SegmentLayout layout{h.hookhosts, h.workers, h.ring_capacity, h.total_bytes};
    bool sane = ValidSlotCounts(h.hookhosts, h.workers) && ValidRingCapacity(h.ring_capacity) &&
                h.total_bytes == segment.region_.get_size() && ComputeLayout(layout, &expected) &&
                expected.partitions_offset == h.partitions_offset &&
                expected.partition_bytes == h.partition_bytes &&
                expected.rings_offset == h.rings_offset &&
                expected.status_offset == h.status_offset && expected.ring_stride == h.ring_stride;
    if (!sane) {
      return InvalidArgument("shared memory '" + name +
                             "': header does not match its own layout or the mapping size");
    }
    segment.layout_ = expected;
    return segment;
  } catch (const bip::interprocess_exception& e) {
    return NotFound("shared memory: cannot attach '" + name + "': " + e.what());
  }
}

uint32_t Segment::num_rings() const {
  return 2 * layout_.hookhosts * layout_.workers + num_slots();
}
uint32_t Segment::SubmissionRing(uint32_t hookhost, uint32_t worker) const {
  return hookhost * layout_.workers + worker;
}
uint32_t Segment::CompletionRing(uint32_t worker, uint32_t hookhost) const {
  return layout_.hookhosts * layout_.workers + worker * layout_.hookhosts + hookhost;
}
uint32_t Segment::ControlRing(uint32_t slot) const {
  return 2 * layout_.hookhosts * layout_.workers + slot;
}

uint32_t Segment::RingConsumerSlot(uint32_t ring) const {
  uint32_t pairs = layout_.hookhosts * layout_.workers;
  if (ring < pairs) {
    return WorkerSlot(ring % layout_.workers);  // Submission ring (hook host, worker).
  }
  if (ring < 2 * pairs) {
    return HookhostSlot((ring - pairs) % layout_.hookhosts);  // Completion ring.
  }
  return ring - 2 * pairs;  // Control ring.
}

SlotData& Segment::slot(uint32_t slot) const {
  return *reinterpret_cast<SlotData*>(base() + layout_.slots_offset + slot * sizeof(SlotData));
}
StatusData& Segment::status(uint32_t slot) const {
  return *reinterpret_cast<StatusData*>(base() + layout_.status_offset + slot * sizeof(StatusData));
}

DoorbellData& Segment::doorbell(uint32_t slot) const {
  return *reinterpret_cast<DoorbellData*>(base() + layout_.doorbells_offset +
                                          slot * sizeof(DoorbellData));
}
RingData& Segment::ring(uint32_t ring) const {
  return *reinterpret_cast<RingData*>(base() + layout_.rings_offset + ring * layout_.ring_stride);
}
DescriptorData* Segment::descriptors(uint32_t ring) const {
  return reinterpret_cast<DescriptorData*>(
      base() + layout_.rings_offset + ring * layout_.ring_stride + AlignUp(sizeof(RingData), 64));
}
std::span<uint8_t> Segment::partition(uint32_t slot) const {
  return {base() + layout_.partitions_offset + slot * layout_.partition_bytes,
          layout_.partition_bytes};
}

}  // namespace ferry::shm
