// libFuzzer target: the safetensors parser must reject or accept any bytes without reading
// out of bounds, crashing or hanging; an accepted index must describe bytes inside the file.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> file(data, size);
  ferry::Result<ferry::SafetensorsIndex> index = ferry::ParseSafetensors(file, "fuzz");
  if (index.ok()) {
    for (const ferry::TensorInfo& t : index->tensors) {
      if (t.end < t.begin || index->data_start + t.end > size) {
        std::abort();  // The parser accepted a tensor outside the file.
      }
    }
  }
  return 0;
}
