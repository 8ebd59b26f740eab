// The trace settings Triton's trace extension names (trace_level, trace_rate, trace_count),
// as ferry's hook hosts sample requests with them, and their encoding in one 64-bit word for
// shared memory. What a client sets on one hook host reaches every hook host of the node
// (docs/frontend.md, "Tracing").
//
//   trace_level ["TIMESTAMPS"] traces (the request's spans go to the OTLP collector named by
//   [trace] otlp_endpoint), ["OFF"] does not; trace_rate N samples one request of every N
//   each hook host takes; trace_count C stops after C traces node-wide (-1: no limit).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>

namespace ferry {

struct TraceSettings {
  bool timestamps = false;  // trace_level: TIMESTAMPS (true) or OFF.
  uint32_t rate = 1000;     // 1..kMaxRate.
  int64_t count = -1;       // -1: no limit; else 0..kMaxCount.
  bool operator==(const TraceSettings&) const = default;

  static constexpr uint32_t kMaxRate = (1u << 24) - 1;
  static constexpr int64_t kMaxCount = (int64_t{1} << 26) - 2;
  // Bit 62 marks a word that holds settings; the level in bit 0, the rate in bits 1-24, the
  // count + 1 in bits 25-50 (0: no limit), a change's sequence in bits 51-60.
  uint64_t Encode(uint32_t sequence = 0) const;
  // False for a word that holds no settings (0, no bit 62, a bit no setting uses, a rate of
  // 0); `sequence` (optional) gets the change's sequence.
  static bool Decode(uint64_t word, TraceSettings* out, uint32_t* sequence = nullptr);
};

}  // namespace ferry
