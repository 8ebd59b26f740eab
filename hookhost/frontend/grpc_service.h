// The KServe v2 gRPC service of a hook host: inference.GRPCInferenceService (ServerLive,
// ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig, ModelStatistics,
// ModelInfer, ModelStreamInfer, the repository index) over the same request flow as HTTP
// (kserve_service.h). GrpcFrontEnd (grpc_front_end.h) serves it on the hook host's connections.
//
// Tensors travel as raw_input_contents / raw_output_contents (what tritonclient sends and
// reads) or typed contents on input. Errors map to gRPC status codes of the same names; a
// gRPC deadline becomes the request's deadline. Every method runs on the completion-queue API
// (grpc_calls.h), driven by the front end's one thread: no call or stream holds a thread while
// it waits. Every method takes its message as bytes and parses it itself: a message that is
// not valid protobuf is INVALID_ARGUMENT naming its type (in a stream, answered in its place).
//
// Thread safety: the functions are pure; the service is gRPC's to call from its threads.
#pragma once

#include <memory>

#include "common/result.h"
#include "hookhost/frontend/kserve_service.h"
#include "hookhost/frontend/proto/inference.pb.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace ferry::frontend {

class CallLane;
class CallQueue;

// ModelInferRequest -> the flow's request. The returned spans point into `request` (raw
// contents) or the result's storage (typed contents). INVALID_ARGUMENT naming the tensor.
Result<ParsedInfer> ParseGrpcInfer(const inference::ModelInferRequest& request);
// The flow's answer -> ModelInferResponse (outputs as raw contents; timings as parameters).
// `partial` (a decoupled model's response): outputs asked for but not in it are left out
// rather than refused.
Status EncodeGrpcInfer(const std::string& model, int64_t version, const ParsedInfer& request,
                       const hookhost::InferResponse& response, inference::ModelInferResponse* out,
                       bool partial = false);

// inference.GRPCInferenceService over a KServeService, for GrpcFrontEnd's server.
class InferenceService {
 public:
  virtual ~InferenceService() = default;
  // What the server registers.
  virtual grpc::Service* grpc_service() = 0;
  // Starts taking every method's calls on `queue` (`infer_calls` ModelInfer calls asked for
  // at any time, one of each other method); the methods that may wait on ferryd run on
  // `lane`. Once. REQUIRES: the server is started; this service, `queue` and `lane` outlive
  // every call (CallQueue::ShutdownWhenEmpty).
  virtual void Serve(CallQueue* queue, CallLane* lane, int infer_calls) = 0;
};

// The service over `service` (which outlives it).
std::unique_ptr<InferenceService> MakeInferenceService(KServeService* service);

}  // namespace ferry::frontend
