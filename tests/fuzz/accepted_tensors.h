// What both infer-parser fuzz targets require of a request their parser accepted: every
// tensor matches its shape (a BYTES tensor: its elements' lengths hold) and lies inside what
// the parser was given or its own storage (checked by touching every byte, so ASan sees a span
// that lies).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "hookhost/frontend/kserve_codec.h"

inline void CheckAcceptedTensors(const ferry::frontend::ParsedInfer& parsed) {
  volatile uint8_t sum = 0;
  for (const ferry::hookhost::ClientTensor& t : parsed.request.inputs) {
    if (t.dtype == ferry::DType::kBytes) {  // Its size is its data's: every length must hold.
      std::optional<uint64_t> count = ferry::ElementCount(t.shape);
      if (!count || !ferry::CheckBytesTensor(t.bytes, *count).ok()) {
        std::abort();  // A BYTES tensor whose elements lie was accepted.
      }
    } else if (std::optional<uint64_t> bytes = ferry::TensorByteSize(t.dtype, t.shape);
               !bytes || *bytes != t.bytes.size()) {
      std::abort();  // A tensor that disagrees with its shape was accepted.
    }
    for (uint8_t b : t.bytes) {
      sum = static_cast<uint8_t>(sum + b);
    }
  }
}
