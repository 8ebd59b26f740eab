// The node's shared memory: one POSIX shared-memory object per writer (layout.h), created by
// the supervisor side (Boost.Interprocess named shared memory, mode 0600) and attached by
// every child as the owner of one slot. Gives typed access to the plain data of layout.h.
//
// Who maps what (docs/shared_memory.md, "Write map"):
//   - the supervisor (Create, or Attach with kSupervisor): every object, read-write;
//   - a slot's process (Attach with its slot): its own object read-write; the supervisor's
//     object and every object of the other kind (a hook host: the workers'; a worker: the hook
//     hosts') read-only, opened O_RDONLY so the mapping cannot be made writable; objects of
//     its own kind (other hook hosts' tensors, other workers') not at all.
// A write through a read-only mapping faults (SIGSEGV); an accessor for an object that is not
// mapped aborts with a message (a bug in the caller, never input).
//
// Thread safety: the Segment object is immutable after Create/Attach and safe for concurrent
// use; the shared data it points at follows layout.h's per-field writer rules.
// Process safety: stale objects of the same name (a crashed run) are removed by Create;
// Attach refuses a segment of another layout version or objects of the wrong size. A process
// that must not reopen objects read-write (a sandboxed hook host) attaches before its sandbox
// forbids open().
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "shm/layout.h"

namespace ferry::shm {

struct StatusData;            // shm/status.h
struct FrontEndCountersData;  // shm/status.h
struct KeyTableData;          // shm/key_table.h

struct SegmentLayout {
  uint32_t hookhosts = 1;
  uint32_t workers = 1;
  uint32_t ring_capacity = 1024;    // Descriptors per ring: a power of two.
  uint64_t total_bytes = 64 << 20;  // All objects together.
};

// Offsets inside one slot object (hook hosts and workers differ in their ring counts).
struct SlotObjectLayout {
  uint32_t rings_in = 0;   // Rings this slot consumes (heads it writes).
  uint32_t rings_out = 0;  // Rings this slot produces (tails and descriptors it writes).
  uint64_t accounting_offset = 0;
  uint64_t bell_offset = 0;
  uint64_t status_offset = 0;
  uint64_t counters_offset = 0;  // Hook hosts: FrontEndCountersData (workers: 0, none).
  uint64_t heads_offset = 0;
  uint64_t tails_offset = 0;
  uint64_t partition_offset = 0;
  uint64_t bytes = 0;
};

// Every offset of every object, computed from the header's counts and sizes alone.
struct SegmentOffsets {
  SlotObjectLayout hookhost;
  SlotObjectLayout worker;
  uint64_t generations_offset = 0;  // In the supervisor's object, as are the three below.
  uint64_t supervisor_bell_offset = 0;
  uint64_t reset_tails_offset = 0;
  uint64_t control_tails_offset = 0;
  uint64_t keys_offset = 0;         // KeyTableData (shm/key_table.h).
  uint64_t tenant_seen_offset = 0;  // Per hook host and tenant: in flight, then admitted.
  uint64_t leaving_offset = 0;      // std::atomic<uint64_t>: models announced to be unloaded or
                                    // unloaded (indices are never reused),
                                    // then std::atomic<uint64_t>: the node is stopping,
                                    // then std::atomic<uint64_t>: the node's log settings.
  uint64_t supervisor_bytes = 0;
  uint64_t partition_bytes = 0;
};

// One mapped object, for registering memory with a device and for tests.
struct Mapping {
  uint32_t slot = kSupervisor;  // Whose object: a slot, or kSupervisor.
  std::span<uint8_t> bytes;
  bool writable = false;
};

class Segment {
 public:
  // Creates every object of the segment `name` (removing stale ones first), mode 0600, and
  // initialises every slot (generation 1), bell, status and ring. Returns the supervisor's
  // view (everything read-write). INVALID_ARGUMENT when the layout does not fit: each
  // partition must hold at least 64 KiB; at most kMaxPerKind hook hosts and workers.
  static Result<Segment> Create(const std::string& name, const SegmentLayout& layout);
  // Maps an existing segment as `owner`: a slot (see the file comment) or kSupervisor.
  // NOT_FOUND when absent; INVALID_ARGUMENT naming the mismatch for a foreign magic, another
  // layout version, an owner that is not a slot, or objects whose sizes disagree with the
  // header.
  static Result<Segment> Attach(const std::string& name, uint32_t owner);
  // Removes every object's name (existing mappings stay valid until unmapped). True if the
  // supervisor's object existed.
  static bool Remove(const std::string& name);
  // "ferry-<node name>": the segment a node uses.
  static std::string NameForNode(std::string_view node_name);
  // The object holding `slot`'s writable state: "<name>.s<slot>"; kSupervisor: "<name>".
  static std::string ObjectName(const std::string& name, uint32_t slot);

  Segment(Segment&&) = default;
  Segment& operator=(Segment&&) = default;

  const std::string& name() const { return name_; }
  // Whose view this is: a slot, or kSupervisor.
  uint32_t owner() const { return owner_; }
  // Private, validated copy of the header; every offset comes from it, never from shared
  // memory (any process could scribble on that).
  const SegmentHeaderData& layout() const { return layout_; }
  uint32_t hookhosts() const { return layout_.hookhosts; }
  uint32_t workers() const { return layout_.workers; }
  uint32_t num_slots() const { return layout_.hookhosts + layout_.workers; }
  uint32_t HookhostSlot(uint32_t hookhost) const { return hookhost; }
  uint32_t WorkerSlot(uint32_t worker) const { return layout_.hookhosts + worker; }
  bool IsWorkerSlot(uint32_t slot) const { return slot >= layout_.hookhosts; }
  // Whether this view maps `slot`'s object (kSupervisor: the supervisor's), and read-write.
  bool IsMapped(uint32_t slot) const;
  bool IsWritable(uint32_t slot) const;
  std::vector<Mapping> mappings() const;

  // Ring indices.
  uint32_t num_rings() const;
  uint32_t SubmissionRing(uint32_t hookhost, uint32_t worker) const;
  uint32_t CompletionRing(uint32_t worker, uint32_t hookhost) const;
  uint32_t ControlRing(uint32_t slot) const;
  // Who produces (kSupervisor for control rings) and consumes a ring, from the private layout.
  uint32_t RingProducerSlot(uint32_t ring) const;
  uint32_t RingConsumerSlot(uint32_t ring) const;
  uint32_t ring_capacity() const { return layout_.ring_capacity; }

  // REQUIRES: indices in range and the object mapped (IsMapped); writing REQUIRES IsWritable.
  std::atomic<uint32_t>& generation(uint32_t slot) const;  // Supervisor-written.
  // Where ResetSlot restarted `ring` when its producer last died (supervisor-written; the
  // consumer rewinds there). REQUIRES: not a control ring.
  std::atomic<uint64_t>& ring_reset_tail(uint32_t ring) const;
  AccountingData& accounting(uint32_t slot) const;
  BellData& bell(uint32_t slot) const;  // A slot, or kSupervisor.
  StatusData& status(uint32_t slot) const;
  // REQUIRES: a hook host slot.
  FrontEndCountersData& frontend_counters(uint32_t slot) const;
  // The API key digests, in the supervisor's object (writable by the supervisor only).
  KeyTableData& keys() const;
  // ferryd's copy, made each tick, of hook host `hookhost`'s tenant_in_flight and
  // tenant_admitted for `tenant` (FrontEndCountersData), in the supervisor's object: how a
  // hook host sees the others' requests (hookhost/tenant_limits.h). REQUIRES: hookhost <
  // hookhosts(), tenant <= kMaxTenants; writing REQUIRES the supervisor's view.
  std::atomic<uint64_t>& tenant_in_flight_seen(uint32_t hookhost, uint32_t tenant) const;
  std::atomic<uint64_t>& tenant_admitted_seen(uint32_t hookhost, uint32_t tenant) const;
  // Models about to be unloaded (bit i: model index i, below 64), in the supervisor's object:
  // during an unload's notice their readiness answers false while they still serve.
  std::atomic<uint64_t>& leaving_models() const;
  // The node's log settings (common/log_settings.h LogSettings::Encode; 0: none set since
  // start), written by ferryd as a client changes them: a process reads it when it starts.
  std::atomic<uint64_t>& log_settings() const;
  // Nonzero once ferryd begins to stop the node (its drain notice included): readiness and
  // /v2/ferry/load answer as draining while the hook hosts still serve.
  std::atomic<uint64_t>& node_stopping() const;
  RingHeadData& ring_head(uint32_t ring) const;  // In the consumer's object.
  RingTailData& ring_tail(uint32_t ring) const;  // In the producer's object.
  DescriptorData* descriptors(uint32_t ring) const;
  std::span<uint8_t> partition(uint32_t slot) const;
  uint64_t partition_bytes() const { return layout_.partition_bytes; }

 private:
  Segment() = default;
  // Object index: slots 0..num_slots-1, the supervisor last.
  uint32_t ObjectIndex(uint32_t slot) const { return slot == kSupervisor ? num_slots() : slot; }
  uint8_t* Base(uint32_t slot) const;  // Aborts when not mapped.
  const SlotObjectLayout& SlotLayout(uint32_t slot) const {
    return IsWorkerSlot(slot) ? offsets_.worker : offsets_.hookhost;
  }
  // Where `ring` sits among its consumer's heads and its producer's tails.
  uint32_t HeadIndex(uint32_t ring) const;
  uint32_t TailIndex(uint32_t ring) const;
  uint64_t ring_stride() const;

  std::string name_;
  uint32_t owner_ = kSupervisor;
  std::vector<boost::interprocess::mapped_region> regions_;  // By object index; unmapped empty.
  std::vector<uint8_t*> bases_;                              // nullptr when unmapped.
  std::vector<bool> writable_;
  SegmentHeaderData layout_{};  // Private, validated copy.
  SegmentOffsets offsets_;      // Computed from layout_ (ComputeLayout in segment.cc).
};

}  // namespace ferry::shm
