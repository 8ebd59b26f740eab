// What both infer-parser fuzz targets require of a request their parser accepted: every
// tensor matches its shape and lies inside what the parser was given or its own storage
// (checked by touching every byte, so ASan sees a span that lies).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "hookhost/frontend/kserve_codec.h"

inline void CheckAcceptedTensors(const ferry::frontend::ParsedInfer& parsed) {
  volatile uint8_t sum = 0;
  for (const ferry::hookhost::ClientTensor& t : parsed.request.inputs) {
    std::optional<uint64_t> bytes = ferry::TensorByteSize(t.dtype, t.shape);
    if (!bytes || *bytes != t.bytes.size()) {
      std::abort();  // A tensor that disagrees with its shape was accepted.
    }
    for (uint8_t b : t.bytes) {
      sum = static_cast<uint8_t>(sum + b);
    }
  }
}
