#include "shm/segment.h"

#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "shm/key_table.h"
#include "shm/status.h"

namespace ferry::shm {
namespace bip = boost::interprocess;

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMinPartition = 64 << 10;

uint64_t RingStride(uint32_t capacity) {
  return AlignUp(sizeof(RingTailData), 64) + uint64_t{capacity} * sizeof(DescriptorData);
}

SlotObjectLayout SlotObject(uint32_t rings_in, uint32_t rings_out, uint32_t capacity,
                            bool hookhost) {
  SlotObjectLayout l;
  l.rings_in = rings_in;
  l.rings_out = rings_out;
  uint64_t offset = 0;
  l.accounting_offset = offset;
  offset = AlignUp(offset + sizeof(AccountingData), 64);
  l.bell_offset = offset;
  offset = AlignUp(offset + sizeof(BellData), 64);
  l.status_offset = offset;
  offset = AlignUp(offset + sizeof(StatusData), 64);
  if (hookhost) {
    l.counters_offset = offset;
    offset = AlignUp(offset + sizeof(FrontEndCountersData), 64);
  }
  l.heads_offset = offset;
  offset += uint64_t{rings_in} * AlignUp(sizeof(RingHeadData), 64);
  l.tails_offset = AlignUp(offset, 64);
  offset = l.tails_offset + uint64_t{rings_out} * RingStride(capacity);
  l.partition_offset = AlignUp(offset, kPage);
  return l;
}

bool ValidRingCapacity(uint32_t capacity) {
  return capacity >= 2 && (capacity & (capacity - 1)) == 0 && capacity <= (1u << 20);
}

bool ValidSlotCounts(uint64_t hookhosts, uint64_t workers) {
  return hookhosts > 0 && workers > 0 && hookhosts <= kMaxPerKind && workers <= kMaxPerKind;
}

// False when the partitions would be too small.
bool ComputeLayout(const SegmentLayout& in, SegmentOffsets* out) {
  uint32_t slots = in.hookhosts + in.workers;
  SegmentOffsets c;
  c.hookhost = SlotObject(in.workers + 1, in.workers, in.ring_capacity, true);
  c.worker = SlotObject(in.hookhosts + 1, in.hookhosts, in.ring_capacity, false);
  uint64_t offset = AlignUp(sizeof(SegmentHeaderData), 64);
  c.generations_offset = offset;
  offset = AlignUp(offset + slots * sizeof(std::atomic<uint32_t>), 64);
  c.supervisor_bell_offset = offset;
  offset = AlignUp(offset + sizeof(BellData), 64);
  c.reset_tails_offset = offset;
  offset = AlignUp(offset + 2ull * in.hookhosts * in.workers * sizeof(std::atomic<uint64_t>), 64);
  c.control_tails_offset = offset;
  offset = AlignUp(offset + slots * RingStride(in.ring_capacity), 64);
  c.keys_offset = offset;
  offset = AlignUp(offset + sizeof(KeyTableData), 64);
  c.tenant_seen_offset = offset;
  offset =
      AlignUp(offset + 2ull * in.hookhosts * (kMaxTenants + 1) * sizeof(std::atomic<uint64_t>), 64);
  c.leaving_offset = offset;
  offset += 3 * sizeof(std::atomic<uint64_t>);
  c.supervisor_bytes = AlignUp(offset, kPage);
  uint64_t overhead = c.supervisor_bytes + in.hookhosts * c.hookhost.partition_offset +
                      in.workers * c.worker.partition_offset;
  if (overhead >= in.total_bytes) {
    return false;
  }
  c.partition_bytes = (in.total_bytes - overhead) / slots / kBlockAlignment * kBlockAlignment;
  c.hookhost.bytes = c.hookhost.partition_offset + c.partition_bytes;
  c.worker.bytes = c.worker.partition_offset + c.partition_bytes;
  *out = c;
  return c.partition_bytes >= kMinPartition;
}

}  // namespace

std::string Segment::NameForNode(std::string_view node_name) {
  return "ferry-" + std::string(node_name);
}

std::string Segment::ObjectName(const std::string& name, uint32_t slot) {
  return slot == kSupervisor ? name : name + ".s" + std::to_string(slot);
}

bool Segment::Remove(const std::string& name) {
  // The slot count of a stale segment may be unreadable (a scribbled header): every name a
  // segment could have is removed.
  for (uint32_t s = 0; s < kMaxSlots; ++s) {
    bip::shared_memory_object::remove(ObjectName(name, s).c_str());
  }
  return bip::shared_memory_object::remove(name.c_str());
}

Result<Segment> Segment::Create(const std::string& name, const SegmentLayout& layout) {
  if (!ValidSlotCounts(layout.hookhosts, layout.workers)) {
    return InvalidArgument("shared memory: need 1 to " + std::to_string(kMaxPerKind) +
                           " hook hosts and 1 to " + std::to_string(kMaxPerKind) +
                           " workers, got " + std::to_string(layout.hookhosts) + " + " +
                           std::to_string(layout.workers));
  }
  if (!ValidRingCapacity(layout.ring_capacity)) {
    return InvalidArgument("shared memory: ring capacity must be a power of two in [2, 2^20]");
  }
  SegmentOffsets c;
  if (!ComputeLayout(layout, &c)) {
    return InvalidArgument("shared memory: " + std::to_string(layout.total_bytes) +
                           " bytes leave less than 64 KiB per process partition for " +
                           std::to_string(layout.hookhosts + layout.workers) +
                           " processes; raise node.shm_size");
  }
  // Stale objects from a crashed run never block a new start.
  Remove(name);
  Segment segment;
  segment.name_ = name;
  segment.owner_ = kSupervisor;
  segment.layout_ = {kMagic,           kLayoutVersion,       layout.hookhosts,
                     layout.workers,   layout.ring_capacity, layout.total_bytes,
                     c.partition_bytes};
  segment.offsets_ = c;
  uint32_t slots = segment.num_slots();
  try {
    bip::permissions mode(0600);
    for (uint32_t i = 0; i <= slots; ++i) {
      uint32_t slot = i == slots ? kSupervisor : i;
      uint64_t bytes = slot == kSupervisor ? c.supervisor_bytes : segment.SlotLayout(slot).bytes;
      std::string object_name = ObjectName(name, slot);
      bip::shared_memory_object object(bip::create_only, object_name.c_str(), bip::read_write,
                                       mode);
      object.truncate(static_cast<bip::offset_t>(bytes));
      segment.regions_.emplace_back(object, bip::read_write);
      segment.bases_.push_back(static_cast<uint8_t*>(segment.regions_.back().get_address()));
      segment.writable_.push_back(true);
    }
  } catch (const bip::interprocess_exception& e) {
    Remove(name);
    return Internal("shared memory: cannot create '" + name + "': " + e.what());
  }
  // Fresh objects read as zeros; every shared type is still constructed in place.
  for (uint32_t s = 0; s < slots; ++s) {
    const SlotObjectLayout& l = segment.SlotLayout(s);
    uint8_t* base = segment.bases_[s];
    new (base + l.accounting_offset) AccountingData{};
    new (base + l.bell_offset) BellData{};
    new (base + l.status_offset) StatusData{};
    if (l.counters_offset != 0) {
      new (base + l.counters_offset) FrontEndCountersData{};
    }
    for (uint32_t r = 0; r < l.rings_in; ++r) {
      auto* head =
          new (base + l.heads_offset + r * AlignUp(sizeof(RingHeadData), 64)) RingHeadData{};
      head->synced_generation.store(1, std::memory_order_relaxed);  // Every slot starts at 1.
    }
    for (uint32_t r = 0; r < l.rings_out; ++r) {
      new (base + l.tails_offset + r * RingStride(layout.ring_capacity)) RingTailData{};
    }
    new (&segment.generation(s)) std::atomic<uint32_t>(1);
  }
  uint8_t* supervisor = segment.bases_[slots];
  new (supervisor + c.supervisor_bell_offset) BellData{};
  new (supervisor + c.keys_offset) KeyTableData{};
  new (supervisor + c.leaving_offset) std::atomic<uint64_t>(0);
  for (uint64_t i = 0; i < 2ull * layout.hookhosts * (kMaxTenants + 1); ++i) {
    new (supervisor + c.tenant_seen_offset + i * sizeof(std::atomic<uint64_t>))
        std::atomic<uint64_t>(0);
  }
  new (supervisor + c.leaving_offset + sizeof(std::atomic<uint64_t>)) std::atomic<uint64_t>(0);
  new (supervisor + c.leaving_offset + 2 * sizeof(std::atomic<uint64_t>)) std::atomic<uint64_t>(0);
  for (uint32_t r = 0; r < 2 * layout.hookhosts * layout.workers; ++r) {
    new (&segment.ring_reset_tail(r)) std::atomic<uint64_t>(0);
  }
  for (uint32_t s = 0; s < slots; ++s) {
    new (supervisor + c.control_tails_offset + s * RingStride(layout.ring_capacity)) RingTailData{};
  }
  new (supervisor) SegmentHeaderData(segment.layout_);
  std::atomic_thread_fence(std::memory_order_release);
  return segment;
}

Result<Segment> Segment::Attach(const std::string& name, uint32_t owner) {
  bool supervisor = owner == kSupervisor;
  bip::mode_t own_mode = bip::read_write;
  bip::mode_t peer_mode = supervisor ? bip::read_write : bip::read_only;
  Segment segment;
  segment.name_ = name;
  segment.owner_ = owner;
  SegmentHeaderData h{};
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), peer_mode);
    bip::mapped_region region(object, peer_mode);
    if (region.get_size() < sizeof(SegmentHeaderData)) {
      return InvalidArgument("shared memory '" + name + "': too small for a header");
    }
    h = *static_cast<const SegmentHeaderData*>(region.get_address());  // One read; checked.
    segment.regions_.resize(1);
    segment.regions_[0] = std::move(region);
  } catch (const bip::interprocess_exception& e) {
    return NotFound("shared memory: cannot attach '" + name + "': " + e.what());
  }
  if (h.magic != kMagic) {
    return InvalidArgument("shared memory '" + name + "': not a ferry segment (bad magic)");
  }
  if (h.layout_version != kLayoutVersion) {
    return InvalidArgument("shared memory '" + name + "': layout version " +
                           std::to_string(h.layout_version) + ", this build speaks " +
                           std::to_string(kLayoutVersion) + "; restart the node");
  }
  SegmentOffsets c;
  SegmentLayout layout{h.hookhosts, h.workers, h.ring_capacity, h.total_bytes};
  bool sane = ValidSlotCounts(h.hookhosts, h.workers) && ValidRingCapacity(h.ring_capacity) &&
              ComputeLayout(layout, &c) && c.partition_bytes == h.partition_bytes &&
              c.supervisor_bytes == segment.regions_[0].get_size();
  if (!sane) {
    return InvalidArgument("shared memory '" + name +
                           "': header does not match its own layout or the mapping size");
  }
  segment.layout_ = h;
  segment.offsets_ = c;
  uint32_t slots = segment.num_slots();
  if (!supervisor && owner >= slots) {
    return InvalidArgument("shared memory '" + name + "': slot " + std::to_string(owner) +
                           " does not exist (the segment has " + std::to_string(slots) + ")");
  }
  bip::mapped_region supervisor_region = std::move(segment.regions_[0]);
  segment.regions_.clear();
  segment.regions_.resize(slots + 1);
  segment.bases_.assign(slots + 1, nullptr);
  segment.writable_.assign(slots + 1, false);
  segment.regions_[slots] = std::move(supervisor_region);
  segment.bases_[slots] = static_cast<uint8_t*>(segment.regions_[slots].get_address());
  segment.writable_[slots] = supervisor;
  for (uint32_t s = 0; s < slots; ++s) {
    bool own = s == owner;
    bool peer = supervisor || segment.IsWorkerSlot(s) != segment.IsWorkerSlot(owner);
    if (!own && !peer) {
      continue;  // Same-kind objects: not needed, so not mapped.
    }
    bip::mode_t mode = own ? own_mode : peer_mode;
    std::string object_name = ObjectName(name, s);
    try {
      bip::shared_memory_object object(bip::open_only, object_name.c_str(), mode);
      bip::mapped_region region(object, mode);
      if (region.get_size() != segment.SlotLayout(s).bytes) {
        return InvalidArgument(
            "shared memory '" + object_name + "': " + std::to_string(region.get_size()) +
            " bytes, the header implies " + std::to_string(segment.SlotLayout(s).bytes) +
            "; header does not match");
      }
      segment.regions_[s] = std::move(region);
    } catch (const bip::interprocess_exception& e) {
      return NotFound("shared memory: cannot attach '" + object_name + "': " + e.what());
    }
    segment.bases_[s] = static_cast<uint8_t*>(segment.regions_[s].get_address());
    segment.writable_[s] = mode == bip::read_write;
  }
  // Pairs with the release fence at the end of Create (and orders this process's first
  // writes after its reading of its generation: recovery.h, StillCurrent).
  std::atomic_thread_fence(std::memory_order_acquire);
  return segment;
}

bool Segment::IsMapped(uint32_t slot) const {
  uint32_t i = ObjectIndex(slot);
  return i < bases_.size() && bases_[i] != nullptr;
}

bool Segment::IsWritable(uint32_t slot) const {
  return IsMapped(slot) && writable_[ObjectIndex(slot)];
}

std::vector<Mapping> Segment::mappings() const {
  std::vector<Mapping> out;
  for (uint32_t i = 0; i < bases_.size(); ++i) {
    if (bases_[i] != nullptr) {
      out.push_back({i == num_slots() ? kSupervisor : i,
                     {bases_[i], regions_[i].get_size()},
                     static_cast<bool>(writable_[i])});
    }
  }
  return out;
}

uint8_t* Segment::Base(uint32_t slot) const {
  uint32_t i = ObjectIndex(slot);
  if (i >= bases_.size() || bases_[i] == nullptr) {
    std::fprintf(stderr,
                 "ferry: shared-memory object of slot %u is not mapped in this view (owner %u)\n",
                 slot, owner_);
    std::abort();
  }
  return bases_[i];
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

uint32_t Segment::RingProducerSlot(uint32_t ring) const {
  uint32_t pairs = layout_.hookhosts * layout_.workers;
  if (ring < pairs) {
    return HookhostSlot(ring / layout_.workers);
  }
  if (ring < 2 * pairs) {
    return WorkerSlot((ring - pairs) / layout_.hookhosts);
  }
  return kSupervisor;
}

uint32_t Segment::HeadIndex(uint32_t ring) const {
  uint32_t pairs = layout_.hookhosts * layout_.workers;
  if (ring < pairs) {
    return ring / layout_.workers;  // A worker's heads: one per hook host.
  }
  if (ring < 2 * pairs) {
    return (ring - pairs) / layout_.hookhosts;  // A hook host's heads: one per worker.
  }
  // The control ring comes after the peers' rings.
  return IsWorkerSlot(ring - 2 * pairs) ? layout_.hookhosts : layout_.workers;
}

uint32_t Segment::TailIndex(uint32_t ring) const {
  uint32_t pairs = layout_.hookhosts * layout_.workers;
  if (ring < pairs) {
    return ring % layout_.workers;
  }
  if (ring < 2 * pairs) {
    return (ring - pairs) % layout_.hookhosts;
  }
  return ring - 2 * pairs;
}

uint64_t Segment::ring_stride() const { return RingStride(layout_.ring_capacity); }

std::atomic<uint32_t>& Segment::generation(uint32_t slot) const {
  return *reinterpret_cast<std::atomic<uint32_t>*>(Base(kSupervisor) + offsets_.generations_offset +
                                                   slot * sizeof(std::atomic<uint32_t>));
}
std::atomic<uint64_t>& Segment::ring_reset_tail(uint32_t ring) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(Base(kSupervisor) + offsets_.reset_tails_offset +
                                                   ring * sizeof(std::atomic<uint64_t>));
}
AccountingData& Segment::accounting(uint32_t slot) const {
  return *reinterpret_cast<AccountingData*>(Base(slot) + SlotLayout(slot).accounting_offset);
}
BellData& Segment::bell(uint32_t slot) const {
  if (slot == kSupervisor) {
    return *reinterpret_cast<BellData*>(Base(kSupervisor) + offsets_.supervisor_bell_offset);
  }
  return *reinterpret_cast<BellData*>(Base(slot) + SlotLayout(slot).bell_offset);
}
StatusData& Segment::status(uint32_t slot) const {
  return *reinterpret_cast<StatusData*>(Base(slot) + SlotLayout(slot).status_offset);
}

std::atomic<uint64_t>& Segment::leaving_models() const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(Base(kSupervisor) + offsets_.leaving_offset);
}

std::atomic<uint64_t>& Segment::node_stopping() const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(Base(kSupervisor) + offsets_.leaving_offset +
                                                   sizeof(std::atomic<uint64_t>));
}

std::atomic<uint64_t>& Segment::tenant_in_flight_seen(uint32_t hookhost, uint32_t tenant) const {
  uint64_t index = uint64_t{hookhost} * (kMaxTenants + 1) + tenant;
  return reinterpret_cast<std::atomic<uint64_t>*>(Base(kSupervisor) +
                                                  offsets_.tenant_seen_offset)[index];
}

std::atomic<uint64_t>& Segment::tenant_admitted_seen(uint32_t hookhost, uint32_t tenant) const {
  uint64_t index = uint64_t{layout_.hookhosts + hookhost} * (kMaxTenants + 1) + tenant;
  return reinterpret_cast<std::atomic<uint64_t>*>(Base(kSupervisor) +
                                                  offsets_.tenant_seen_offset)[index];
}

std::atomic<uint64_t>& Segment::log_settings() const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(Base(kSupervisor) + offsets_.leaving_offset +
                                                   2 * sizeof(std::atomic<uint64_t>));
}

KeyTableData& Segment::keys() const {
  return *reinterpret_cast<KeyTableData*>(Base(kSupervisor) + offsets_.keys_offset);
}

FrontEndCountersData& Segment::frontend_counters(uint32_t slot) const {
  return *reinterpret_cast<FrontEndCountersData*>(Base(slot) + SlotLayout(slot).counters_offset);
}
RingHeadData& Segment::ring_head(uint32_t ring) const {
  uint32_t consumer = RingConsumerSlot(ring);
  return *reinterpret_cast<RingHeadData*>(Base(consumer) + SlotLayout(consumer).heads_offset +
                                          HeadIndex(ring) * AlignUp(sizeof(RingHeadData), 64));
}
RingTailData& Segment::ring_tail(uint32_t ring) const {
  uint32_t producer = RingProducerSlot(ring);
  uint64_t tails =
      producer == kSupervisor ? offsets_.control_tails_offset : SlotLayout(producer).tails_offset;
  return *reinterpret_cast<RingTailData*>(Base(producer) + tails + TailIndex(ring) * ring_stride());
}
DescriptorData* Segment::descriptors(uint32_t ring) const {
  return reinterpret_cast<DescriptorData*>(reinterpret_cast<uint8_t*>(&ring_tail(ring)) +
                                           AlignUp(sizeof(RingTailData), 64));
}
std::span<uint8_t> Segment::partition(uint32_t slot) const {
  return {Base(slot) + SlotLayout(slot).partition_offset, layout_.partition_bytes};
}

}  // namespace ferry::shm
