// The node's shared-memory segment: created by the supervisor side (Boost.Interprocess named
// shared memory, mode 0600), attached by every child. Gives typed access to the plain data
// of layout.h.
//
// Thread safety: the Segment object is immutable after Create/Attach and safe for concurrent
// use; the shared data it points at follows layout.h's per-field writer rules.
// Process safety: a stale segment of the same name (a crashed run) is removed by Create;
// Attach refuses a segment of another layout version.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "shm/layout.h"

namespace ferry::shm {

struct StatusData;  // shm/status.h

struct SegmentLayout {
  uint32_t hookhosts = 1;
  uint32_t workers = 1;
  uint32_t ring_capacity = 1024;  // Descriptors per ring: a power of two.
  uint64_t total_bytes = 64 << 20;
};

class Segment {
 public:
  // Creates the segment `name` (removing a stale one first), mode 0600, and initialises every
  // slot (generation 1), doorbell and ring. INVALID_ARGUMENT when the layout does not fit:
  // each partition must hold at least 64 KiB.
  static Result<Segment> Create(const std::string& name, const SegmentLayout& layout);
  // Maps an existing segment. NOT_FOUND when absent; INVALID_ARGUMENT naming the mismatch
  // for a foreign magic, another layout version or a header that does not fit the mapping.
  static Result<Segment> Attach(const std::string& name);
  // Removes the name (existing mappings stay valid until unmapped). True if it existed.
  static bool Remove(const std::string& name);
  // "ferry-<node name>": the segment a node uses.
  static std::string NameForNode(std::string_view node_name);

  Segment(Segment&&) = default;
  Segment& operator=(Segment&&) = default;

  const std::string& name() const { return name_; }
  // The header as it is in shared memory now (any process could scribble on it). Every
  // offset this class computes comes instead from `layout()`, the private copy taken and
  // checked at Create/Attach.
  const SegmentHeaderData& header() const { return *header_; }
  const SegmentHeaderData& layout() const { return layout_; }
  uint32_t hookhosts() const { return layout_.hookhosts; }
  uint32_t workers() const { return layout_.workers; }
  uint32_t num_slots() const { return layout_.hookhosts + layout_.workers; }
  uint32_t HookhostSlot(uint32_t hookhost) const { return hookhost; }
  uint32_t WorkerSlot(uint32_t worker) const { return layout_.hookhosts + worker; }
  bool IsWorkerSlot(uint32_t slot) const { return slot >= layout_.hookhosts; }

  // Ring indices.
  uint32_t num_rings() const;
  uint32_t SubmissionRing(uint32_t hookhost, uint32_t worker) const;
  uint32_t CompletionRing(uint32_t worker, uint32_t hookhost) const;
  uint32_t ControlRing(uint32_t slot) const;
  // Who consumes a ring and how many descriptors it holds, from the private layout (the
  // copies in RingData are informational and never trusted).
  uint32_t RingConsumerSlot(uint32_t ring) const;
  uint32_t ring_capacity() const { return layout_.ring_capacity; }

  // REQUIRES: indices in range.
  SlotData& slot(uint32_t slot) const;
  DoorbellData& doorbell(uint32_t slot) const;
  StatusData& status(uint32_t slot) const;
  RingData& ring(uint32_t ring) const;
  DescriptorData* descriptors(uint32_t ring) const;
  std::span<uint8_t> partition(uint32_t slot) const;
  uint64_t partition_bytes() const { return layout_.partition_bytes; }

 private:
  Segment(std::string name, boost::interprocess::mapped_region region);
  uint8_t* base() const { return static_cast<uint8_t*>(region_.get_address()); }

  std::string name_;
  boost::interprocess::mapped_region region_;
  SegmentHeaderData* header_ = nullptr;  // In shared memory.
  SegmentHeaderData layout_{};           // Private, validated copy.
};

}  // namespace ferry::shm
