#include "common/trace_settings.h"

namespace ferry {

namespace {

constexpr uint64_t kPresent = uint64_t{1} << 62;
constexpr int kRateShift = 1;
constexpr int kCountShift = 25;
constexpr int kSequenceShift = 51;
constexpr uint64_t kRateMask = (uint64_t{1} << 24) - 1;
constexpr uint64_t kCountMask = (uint64_t{1} << 26) - 1;
constexpr uint64_t kSequenceMask = (uint64_t{1} << 10) - 1;
constexpr uint64_t kUsed = kPresent | 1 | kRateMask << kRateShift | kCountMask << kCountShift |
                           kSequenceMask << kSequenceShift;

}  // namespace

uint64_t TraceSettings::Encode(uint32_t sequence) const {
  uint64_t count_field = count < 0 ? 0 : static_cast<uint64_t>(count) + 1;
  return kPresent | (timestamps ? 1 : 0) | (uint64_t{rate} & kRateMask) << kRateShift |
         (count_field & kCountMask) << kCountShift |
         (uint64_t{sequence} & kSequenceMask) << kSequenceShift;
}

bool TraceSettings::Decode(uint64_t word, TraceSettings* out, uint32_t* sequence) {
  if ((word & kPresent) == 0 || (word & ~kUsed) != 0) {
    return false;
  }
  auto rate = static_cast<uint32_t>(word >> kRateShift & kRateMask);
  if (rate == 0) {
    return false;
  }
  uint64_t count_field = word >> kCountShift & kCountMask;
  out->timestamps = (word & 1) != 0;
  out->rate = rate;
  out->count = count_field == 0 ? -1 : static_cast<int64_t>(count_field) - 1;
  if (sequence != nullptr) {
    *sequence = static_cast<uint32_t>(word >> kSequenceShift & kSequenceMask);
  }
  return true;
}

}  // namespace ferry
