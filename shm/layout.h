// DESIGN: the node's shared memory, as plain data (the *Data types). Code that runs on it
// lives in segment.h (mapping), arena.h (owner-only allocation), ring.h (SPSC descriptor
// rings and wake-ups) and recovery.h (supervisor-side reset).
//
// Split by writer (docs/shared_memory.md has the write map): one shared-memory object per
// process slot, "<name>.s<slot>", and one for the supervisor, "<name>". A process maps its
// own object read-write and every other object it needs read-only (opened O_RDONLY, so
// mprotect(PROT_WRITE) fails): the MMU, not a convention, keeps it from writing anything but
// what it alone writes. The supervisor maps everything read-write (recovery rewrites a dead
// process's regions).
//
// Supervisor object "<name>":
//   SegmentHeaderData                 magic, layout version, sizes
//   generation[num_slots]             per slot, bumped when its process dies
//   BellData                          the supervisor's wake-up words
//   reset_tail[2 x hookhosts x workers] per non-control ring: where recovery restarted it
//   RingTailData + descriptors        the producer side of each control ring (one per slot)
// Slot object "<name>.s<slot>":
//   AccountingData                    its arena's counters
//   BellData                          its sleeping flag and wake-up words
//   StatusData                        heartbeat and seqlocked status (status.h)
//   RingHeadData[consumed rings]      the consumer side of each ring it reads
//   RingTailData + descriptors        the producer side of each ring it writes
//   partition                         its arena, page aligned
// Slots [0, hookhosts) are hook hosts, [hookhosts, hookhosts + workers) workers. Rings: a
// submission ring per (hook host, worker), a completion ring per (worker, hook host), and a
// control ring per slot fed by the supervisor.
//
// Thread safety: plain shared data; every field documents its single writer and ordering.
// Process safety: each field has a single writer process, enforced by the mappings. A process
// that dies at any point leaves only its own object half-written (or scribbled); ResetSlot
// (recovery.h) re-initialises all of it and bumps the slot's generation so anything still
// addressed to the dead incarnation is recognised.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "common/priority.h"

namespace ferry::shm {

inline constexpr uint64_t kMagic = 0x3179727265664653ULL;  // "SFferry1" little-endian.
// 3: one object per writer; 4: descriptor meta; 5: priority, tenant, cancel, front-end counters;
// 6: weight load events in the status snapshot; 9: placements by residency in the front-end
// counters; 11: requests in flight and admitted per tenant (front-end counters, ferryd's copy),
// requests held and queue waits per tenant and level (status snapshot); 12: the repository
// mailbox in the front-end counters.
inline constexpr uint32_t kLayoutVersion = 13;
inline constexpr uint64_t kBlockAlignment = 256;  // DMA and cudaHostRegister friendly.
inline constexpr uint32_t kMaxTensors = 8;
inline constexpr uint32_t kMaxRank = 8;
inline constexpr uint32_t kMaxSlots = 256;
// A submission's priority (common/priority.h): 1 is the most urgent, kMaxPriority the least;
// 0 means the default level. The worker dispatches a model's queued requests by level, then age.
inline constexpr uint32_t kMaxPriority = kLowestPriority;
// Tenants a node file may declare ([frontend] tenants); a submission's tenant is 1-based into
// that list, 0 for none.
inline constexpr uint32_t kMaxTenants = 16;
// Hook hosts and workers each: a sleeper waits on one word per peer of the other kind, its
// own and the supervisor's, and futex_waitv takes at most 128 words.
inline constexpr uint32_t kMaxPerKind = 126;
// The supervisor's role and producer slot: it owns no partition.
inline constexpr uint32_t kSupervisor = 0xffffffffu;
inline constexpr uint32_t kSupervisorProducer = kSupervisor;
// Wake-up words per bell: one per slot, and one (the last) for the supervisor.
inline constexpr uint32_t kBellTargets = kMaxSlots + 1;

struct SegmentHeaderData {
  // Written once by the creator before any other process attaches; constant afterwards.
  // Every offset is recomputed from these by whoever attaches (segment.cc), never read.
  uint64_t magic;
  uint32_t layout_version;
  uint32_t hookhosts;
  uint32_t workers;
  uint32_t ring_capacity;  // Descriptors per ring, a power of two.
  uint64_t total_bytes;    // All objects together.
  uint64_t partition_bytes;
};

struct AccountingData {
  // Written only by the slot's owner (the arena); read by anyone (metrics, tests). ResetSlot
  // zeroes bytes_in_use and blocks_in_use; high_water and failed_allocations are cumulative.
  // Plain counters, relaxed ordering.
  alignas(64) std::atomic<uint64_t> bytes_in_use;
  std::atomic<uint64_t> high_water;
  std::atomic<uint64_t> failed_allocations;
  std::atomic<uint64_t> blocks_in_use;
};

// A process's wake-up state. Producers never write a consumer's memory to wake it: each
// process bumps a word of its own, `wake[target]`, and the target sleeps on all the words that
// may wake it at once (futex_waitv; ring.h has the protocol).
inline constexpr uint32_t kAwake = 0;
inline constexpr uint32_t kSleepsOnEveryPeer = 1;
inline constexpr uint32_t kSleepsOnOwn = 2;

struct BellData {
  // Set by the owner while it waits (WaitForWork), cleared (kAwake) when it wakes: whose
  // publications may wake it (kSleepsOnEveryPeer, or kSleepsOnOwn: its own process's and the
  // supervisor's only). Any other value reads as kSleepsOnEveryPeer.
  alignas(64) std::atomic<uint32_t> sleeping;
  // wake[t]: bumped by the owner to wake slot t (index kMaxSlots: the supervisor), after
  // publishing something t waits for and seeing t's `sleeping` set. Only t waits on it.
  alignas(64) std::atomic<uint32_t> wake[kBellTargets];
};

struct TensorRefData {
  uint32_t partition;  // Slot whose partition holds the bytes.
  uint16_t dtype;      // ferry::DType as an integer.
  uint16_t rank;
  uint64_t offset;  // From the partition's start.
  uint64_t bytes;
  int64_t shape[kMaxRank];
};

// What a worker measured for one request, carried by its completion (saturating).
struct CompletionTimingData {
  uint32_t queue_us;    // From its submission being drained to its batch beginning.
  uint32_t compute_us;  // Its batch's execution (the whole batch's, shared by its members).
};

// DescriptorData::sequence_flags.
inline constexpr uint8_t kSequenceStart = 1;  // The sequence's first request: state zeroed.
inline constexpr uint8_t kSequenceEnd = 2;    // Its last: the state is dropped after it.

// One fixed-size message on a ring. Untrusted when read: see descriptor.h.
struct DescriptorData {
  uint16_t kind;        // DescriptorKind.
  uint8_t num_tensors;  // Used entries of `tensors`.
  Priority priority;    // Submissions: 0 (default) or 1..kMaxPriority.
  union {
    uint32_t status;  // Completions: 0 ok, else an ErrorCode + 1.
    // Submissions: 0, or a pipeline's committed model call: the pipeline run's number in its
    // hook host, dispatched ahead of new work (at most one per run queued at a time).
    uint32_t meta;
  };
  uint32_t slot;        // Request id: the submitting slot,
  uint32_t generation;  //   its generation,
  uint64_t sequence;    //   and its sequence number.
  uint16_t model;
  uint16_t tenant;  // Submissions: 1-based into the node's tenants, 0 = none.
  union {
    int32_t variant;     // Submissions.
    int32_t batch_size;  // Completions: the compiled size the request ran in (0: none).
  };
  int32_t rows;
  uint32_t sender_generation;  // The producing process's slot generation when it sent this.
  union {
    int64_t deadline_ns;          // Submissions: monotonic; 0 = none.
    CompletionTimingData timing;  // Completions.
  };
  uint64_t trace_id_high;
  uint64_t trace_id_low;
  // Submissions: the request's sequence (a stateful model's, tenant-scoped), 0 = none, and
  // its kSequenceStart / kSequenceEnd flags. Zero elsewhere.
  uint64_t sequence_id;
  uint8_t sequence_flags;
  uint8_t reserved[55];
  TensorRefData tensors[kMaxTensors];
};

// A ring's consumer side, in the consumer's object.
struct RingHeadData {
  // Next index to read (monotonic, never wraps in practice). Published with release after the
  // descriptor is copied out, handing its slot back to the producer.
  alignas(64) std::atomic<uint64_t> head;
  // Descriptors it rejected as invalid (and impossible tails it saw).
  std::atomic<uint64_t> invalid_descriptors;
  // The producer's slot generation this consumer has caught up with (rewound to the reset
  // point for). A restarted producer pushes nothing until it equals its own generation, so
  // it never writes a slot the consumer could still pop as the dead incarnation's.
  std::atomic<uint32_t> synced_generation;
};

// A ring's producer side, in the producer's object; its descriptors follow at the next
// 64-byte boundary: DescriptorData[capacity].
struct RingTailData {
  // Next index to write. Published with release after the descriptor is written, so an
  // acquire load of tail makes it visible.
  alignas(64) std::atomic<uint64_t> tail;
};

static_assert(std::is_standard_layout_v<SegmentHeaderData>);
static_assert(std::is_trivially_copyable_v<DescriptorData>);
static_assert(sizeof(DescriptorData) == 832, "descriptors are 13 cache lines");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex words are 32-bit");

inline constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace ferry::shm
