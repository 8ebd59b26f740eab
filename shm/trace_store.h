// Traces between a hook host and ferryd (docs/frontend.md, "Tracing"): one object per hook
// host ("<segment>.trace<N>", mode 0600) that ferryd creates and only that hook host and
// ferryd map. A sandboxed hook host opens no socket, so the spans of the requests it samples
// go into this object's ring and ferryd exports them (supervisor/trace_exporter.h).
//
//   settings  ferryd -> hook host: the node's TraceSettings word (common/trace_settings.h),
//             its count what is left of trace_count node-wide as ferryd last counted;
//             `sampled_base` (written after it, release) the host's `sampled` ferryd counted
//             it at, so the host may sample count - (sampled - sampled_base) more. The host
//             reads the base first, then the word: a new word with an old base allows less,
//             never more. `asked_taken`: the last `asked` ferryd has taken (until it catches
//             up the host holds its own change).
//   sampled   hook host: requests it chose to trace, cumulative (counted as chosen, before
//             their spans exist, so requests in flight count against trace_count).
//   asked     hook host -> ferryd: settings a client asked this hook host for (`asked_word`
//             and `asked_sampled` first, then `asked` = its sequence, release).
//   head      hook host: spans written; `tail`: ferryd, spans taken. A span is written whole
//             before head moves past it (release); ferryd copies it (acquire) and then moves
//             tail. A full ring drops the new span (counted in `dropped`).
//
// Trust: ferryd treats everything a hook host writes here as hostile (a head that lies is
// clamped to one ring's worth, durations to an hour, unknown models named by number).
// Thread safety: the hook host serialises its writers of the ring (TraceEndpoint); ferryd is
// the only reader. Process safety: each field has one writer (ferryd: settings,
// sampled_base, asked_taken, tail; the hook host: the rest).
#pragma once

#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ferry::shm {

inline constexpr uint32_t kTraceRingSpans = 1024;

// One sampled request, as its hook host saw it: enough for the gateway span and its queue,
// pre, compute and post children.
struct TraceSpanData {
  uint64_t trace_hi;
  uint64_t trace_lo;
  uint64_t parent_span;  // The traceparent's span id (0: the request came without one).
  uint64_t span;         // The gateway span's id.
  int64_t start_unix_ns;
  int64_t validate_ns;
  int64_t preprocess_ns;
  int64_t queue_ns;
  int64_t compute_ns;
  int64_t postprocess_ns;
  int64_t total_ns;
  uint32_t model;  // The model's wire index.
  uint32_t code;   // 0: answered; else the ErrorCode + 1.
};

struct TraceAreaData {
  std::atomic<uint64_t> settings;
  std::atomic<uint64_t> asked_word;
  std::atomic<uint64_t> asked;
  std::atomic<uint64_t> asked_sampled;  // `sampled` when the change was asked.
  std::atomic<uint64_t> asked_taken;
  std::atomic<uint64_t> sampled;
  std::atomic<uint64_t> sampled_base;
  std::atomic<uint64_t> dropped;  // Spans lost to a full ring, cumulative.
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
  TraceSpanData spans[kTraceRingSpans];
};

class TraceStore {
 public:
  // ferryd: removes a stale object of the name, creates "<segment>.trace<hookhost>" (mode
  // 0600) zeroed, and maps it read-write. INTERNAL when it cannot.
  static Result<TraceStore> Create(const std::string& segment, uint32_t hookhost);
  // A hook host: maps its object read-write (before its sandbox forbids open). NOT_FOUND when
  // absent; INVALID_ARGUMENT when its size is not the store's.
  static Result<TraceStore> Open(const std::string& segment, uint32_t hookhost);
  static void Remove(const std::string& segment, uint32_t hookhost);
  static std::string ObjectName(const std::string& segment, uint32_t hookhost) {
    return segment + ".trace" + std::to_string(hookhost);
  }

  TraceAreaData& area() const { return *data_; }

  // Hook host: appends `span`; false (counted as dropped) when the ring is full.
  bool Push(const TraceSpanData& span);
  // ferryd: the spans written since the last call (at most kTraceRingSpans), oldest first.
  std::vector<TraceSpanData> Take();

 private:
  TraceStore() = default;
  boost::interprocess::mapped_region region_;
  TraceAreaData* data_ = nullptr;
};

}  // namespace ferry::shm
