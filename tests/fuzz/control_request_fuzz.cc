// libFuzzer target: ferryd's control-protocol parser (control/control_protocol.h) and the
// .npy reader ferryctl uses (ctl/npy.h), on arbitrary bytes. An accepted request must encode
// to a line that parses back to the same command; an accepted .npy tensor must hold exactly
// its shape's bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "control/control_protocol.h"
#include "ctl/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ferry::Result<ferry::control::ControlRequest> request = ferry::control::ParseControlRequest(text);
  if (request.ok()) {
    std::string line = ferry::control::EncodeControlRequest(*request);
    ferry::Result<ferry::control::ControlRequest> again =
        ferry::control::ParseControlRequest(std::string_view(line).substr(0, line.size() - 1));
    if (!again.ok() || again->command != request->command || again->model != request->model) {
      std::abort();
    }
  }
  ferry::Result<ferry::client::Tensor> tensor = ferry::ctl::ParseNpy(text, "x");
  if (tensor.ok()) {
    std::optional<uint64_t> bytes = ferry::TensorByteSize(tensor->dtype, tensor->shape);
    if (!bytes || *bytes != tensor->bytes.size()) {
      std::abort();
    }
  }
  return 0;
}
