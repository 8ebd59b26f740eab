// The KServe v2 gRPC front end of a hook host: inference.GRPCInferenceService (ServerLive,
// ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig, ModelInfer,
// ModelStreamInfer) over the same request flow as HTTP (kserve_service.h).
//
// Connections come from an inherited listening socket (ferryd's, shared by every hook host):
// an accept thread hands each accepted connection to gRPC (AddInsecureChannelFromFd), so the
// sandbox never needs to create a socket. Tensors travel as raw_input_contents /
// raw_output_contents (what tritonclient sends and reads) or typed contents on input. Errors
// map to gRPC status codes of the same names; a gRPC deadline becomes the request's deadline.
// Messages up to [frontend] max_request_bytes are accepted. Every method runs on gRPC's
// callback API: no call or stream holds a thread while it waits.
//
// Thread safety: Start once, Drain/Stop from any thread. Lifetime: the service outlives it.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "common/result.h"
#include "frontend/kserve_service.h"
#include "frontend/proto/inference.pb.h"

namespace grpc {
class Server;
}

namespace ferry::frontend {

// ModelInferRequest -> the flow's request. The returned spans point into `request` (raw
// contents) or the result's storage (typed contents). INVALID_ARGUMENT naming the tensor.
Result<ParsedInfer> ParseGrpcInfer(const inference::ModelInferRequest& request);
// The flow's answer -> ModelInferResponse (outputs as raw contents; timings as parameters).
Status EncodeGrpcInfer(const std::string& model, int64_t version, const ParsedInfer& request,
                       const hookhost::InferResponse& response, inference::ModelInferResponse* out);

class GrpcFrontEnd {
 public:
  GrpcFrontEnd(KServeService* service, int listen_fd, size_t max_message_bytes);
  ~GrpcFrontEnd();
  GrpcFrontEnd(const GrpcFrontEnd&) = delete;
  GrpcFrontEnd& operator=(const GrpcFrontEnd&) = delete;

  // Builds the server and starts accepting. INTERNAL when gRPC cannot start.
  Status Start();
  // Stops accepting connections (calls in progress finish).
  void Drain();
  // Ends every call (waits up to `deadline_ms` for those in progress) and the accept thread.
  void Stop(int deadline_ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::frontend
