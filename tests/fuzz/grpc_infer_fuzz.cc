// libFuzzer target: the gRPC infer request parser (ParseGrpcInfer,
// hookhost/frontend/grpc_service.h) on arbitrary bytes decoded as a ModelInferRequest, as a hostile
// client would send them. An accepted request's tensors must match their shapes and lie inside the
// message or the parser's own storage, which the target checks by touching every byte.
#include <cstdint>
#include <cstdlib>

#include "hookhost/frontend/grpc_service.h"
#include "tests/fuzz/accepted_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) {
    return 0;
  }
  ferry::Result<ferry::frontend::ParsedInfer> parsed = ferry::frontend::ParseGrpcInfer(request);
  if (!parsed.ok()) {
    return 0;
  }
  CheckAcceptedTensors(*parsed);
  return 0;
}
