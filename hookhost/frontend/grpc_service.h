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
// Connections are bounded: at most max_connections open at once (more are accepted and
// closed at once, so the listening backlog never fills with them and clients fail fast and
// retry, as the HTTP server does); a connection with no call for idle_timeout_ms is closed by
// gRPC (GOAWAY); out of descriptors (EMFILE), the accept thread waits 50 ms instead of
// spinning on the still-readable listening socket.
//
// Thread safety: Start once, Drain/Stop from any thread. Lifetime: the service outlives it.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "common/result.h"
#include "hookhost/frontend/kserve_service.h"
#include "hookhost/frontend/proto/inference.pb.h"

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

struct GrpcOptions {
  size_t max_message_bytes = 64 << 20;
  size_t max_connections = 1024;
  int64_t idle_timeout_ms = 60'000;
};

class GrpcFrontEnd {
 public:
  GrpcFrontEnd(KServeService* service, int listen_fd, const GrpcOptions& options);
  ~GrpcFrontEnd();
  GrpcFrontEnd(const GrpcFrontEnd&) = delete;
  GrpcFrontEnd& operator=(const GrpcFrontEnd&) = delete;

  // Builds the server and starts accepting. INTERNAL when gRPC cannot start.
  Status Start();
  // Stops accepting connections (calls in progress finish).
  void Drain();
  // Ends every call (waits up to `deadline_ms` for those in progress) and the accept thread.
  void Stop(int deadline_ms);
  // Connections closed at once because max_connections were open.
  uint64_t refused_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::frontend
