// DESIGN: the shared-memory segment, as plain data (the *Data types). Code that runs on it
// lives in segment.h (mapping), arena.h (owner-only allocation), ring.h (SPSC descriptor
// rings) and recovery.h (supervisor-side reset).
//
// Layout (offsets from the segment base; nothing in shared memory is a pointer):
//   SegmentHeaderData                 magic, layout version, sizes, table offsets
//   SlotData[num_slots]               per process slot: generation, partition, accounting
//   DoorbellData[num_slots]           per consuming process: the futex word it sleeps on
//   StatusData[num_slots]             per process: heartbeat and seqlocked status snapshot
//   RingData + DescriptorData[cap]    per ring, ring_count of them
//   partitions                        one per slot, 256-byte aligned
// Slots [0, hookhosts) are hook hosts, [hookhosts, hookhosts + workers) workers. Rings: a
// submission ring per (hook host, worker), a completion ring per (worker, hook host), and a
// control ring per slot fed by the supervisor.
//
// Thread safety: plain shared data; every field documents its single writer and ordering.
// Process safety: each field names its single writer. A process that dies at any point
// leaves only its own fields half-written; ResetSlot (recovery.h) repairs them and bumps the
// slot's generation so anything still addressed to the dead incarnation is recognised.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace ferry::shm {

inline constexpr uint64_t kMagic = 0x3179727265664653ULL;  // "SFferry1" little-endian.
inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr uint64_t kBlockAlignment = 256;  // DMA and cudaHostRegister friendly.
inline constexpr uint32_t kMaxTensors = 8;
inline constexpr uint32_t kMaxRank = 8;
inline constexpr uint32_t kMaxSlots = 256;

struct SegmentHeaderData {
  // Written once by the creator before any other process attaches; constant afterwards.
  uint64_t magic;
  uint32_t layout_version;
  uint32_t hookhosts;
  uint32_t workers;
  uint32_t ring_capacity;  // Descriptors per ring, a power of two.
  uint64_t total_bytes;
  uint64_t partition_bytes;
  uint64_t slots_offset;
  uint64_t doorbells_offset;
  uint64_t status_offset;  // StatusData[num_slots] (shm/status.h).
  uint64_t rings_offset;
  uint64_t ring_stride;  // Bytes per RingData including its descriptors.
  uint64_t partitions_offset;
};

struct SlotData {
  // Written by the supervisor (ResetSlot); read by everyone. Bumped when the slot's process
  // dies, so requests and completions of the old incarnation are recognised and dropped.
  std::atomic<uint32_t> generation;
  uint32_t padding0;
  // Accounting: written only by the slot's owner (the arena); read by anyone (metrics,
  // tests). ResetSlot zeroes bytes_in_use and blocks_in_use; high_water and
  // failed_allocations are cumulative. Plain counters, relaxed ordering.
  std::atomic<uint64_t> bytes_in_use;
  std::atomic<uint64_t> high_water;
  std::atomic<uint64_t> failed_allocations;
  std::atomic<uint64_t> blocks_in_use;
};

struct DoorbellData {
  // The futex word its consumer sleeps on. Incremented by any producer that finds
  // `sleeping` set after publishing; read by the consumer before it sleeps.
  alignas(64) std::atomic<uint32_t> word;
  // Set by the consumer before it sleeps, cleared when it wakes (consumer-written).
  std::atomic<uint32_t> sleeping;
};

struct TensorRefData {
  uint32_t partition;  // Slot whose partition holds the bytes.
  uint16_t dtype;      // ferry::DType as an integer.
  uint16_t rank;
  uint64_t offset;  // From the partition's start.
  uint64_t bytes;
  int64_t shape[kMaxRank];
};

// One fixed-size message on a ring. Untrusted when read: see descriptor.h.
struct DescriptorData {
  uint16_t kind;         // DescriptorKind.
  uint16_t num_tensors;  // Used entries of `tensors`.
  uint32_t status;       // Completions: 0 ok, else an ErrorCode + 1.
  uint32_t slot;         // Request id: the submitting slot,
  uint32_t generation;   //   its generation,
  uint64_t sequence;     //   and its sequence number.
  uint32_t model;
  int32_t variant;
  int32_t rows;
  uint32_t sender_generation;  // The producing process's slot generation when it sent this.
  int64_t deadline_ns;         // Monotonic; 0 = none.
  uint64_t trace_id_high;
  uint64_t trace_id_low;
  TensorRefData tensors[kMaxTensors];
};

struct RingData {
  // Constant after creation; informational only: processes take the capacity and the slots
  // from their private copy of the header (Segment::layout), never from here.
  uint32_t capacity;       // Power of two.
  uint32_t producer_slot;  // kSupervisorProducer for control rings.
  uint32_t consumer_slot;
  uint32_t padding0;
  // Written only by the consumer: next index to read (monotonic, never wraps in practice).
  alignas(64) std::atomic<uint64_t> head;
  // Consumer-written: descriptors it rejected as invalid.
  std::atomic<uint64_t> invalid_descriptors;
  // Written only by the producer: next index to write. Published with release ordering
  // after the descriptor is written, so an acquire load of tail makes it visible.
  alignas(64) std::atomic<uint64_t> tail;
  // Descriptors follow at the next 64-byte boundary: DescriptorData[capacity].
};

inline constexpr uint32_t kSupervisorProducer = 0xffffffffu;

static_assert(std::is_standard_layout_v<SegmentHeaderData>);
static_assert(std::is_trivially_copyable_v<DescriptorData>);
static_assert(sizeof(DescriptorData) == 768, "descriptors are 12 cache lines");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

inline constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace ferry::shm
