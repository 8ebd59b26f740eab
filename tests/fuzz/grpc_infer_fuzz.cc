// libFuzzer target: the gRPC infer request parser (ParseGrpcInfer,
// hookhost/frontend/grpc_service.h) on arbitrary bytes decoded as a ModelInferRequest, as a hostile
// client would send them. An accepted request's tensors must match their shapes and lie inside the
// message or the parser's own storage, which the target checks by touching every byte. First the
// same bytes go through PeekInferHeader (grpc_messages.h), which reads any bytes: it must keep
// nothing but the model, version and id, each within its bound.
#include <cstdint>
#include <cstdlib>

#include "hookhost/frontend/grpc_messages.h"
#include "hookhost/frontend/grpc_service.h"
#include "tests/fuzz/accepted_tensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::Slice slice(data, size);
  inference::ModelInferRequest header;
  ferry::frontend::PeekInferHeader(grpc::ByteBuffer(&slice, 1), &header);
  if (header.inputs_size() != 0 || header.raw_input_contents_size() != 0 ||
      header.model_name().size() > ferry::frontend::kMaxPeekValue ||
      header.id().size() > ferry::frontend::kMaxPeekValue) {
    std::abort();
  }
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
