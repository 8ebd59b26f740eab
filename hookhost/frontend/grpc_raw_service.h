// The generated KServe v2 gRPC service with every method taken as raw bytes, every one on the
// completion-queue API (grpc_calls.h; grpc_service.cc implements them). A method left on the
// callback API would bring grpc++'s own polling threads back (grpc_calls.h says why not).
//
// Every method takes its message as bytes and parses it itself (ReadMessage), so that a
// message that is not valid protobuf is answered INVALID_ARGUMENT with what was wrong: the
// generated handlers answer UNIMPLEMENTED with no detail, which reads as a missing method.
#pragma once

#include "hookhost/frontend/proto/inference.grpc.pb.h"

namespace ferry::frontend {

using Grpc = inference::GRPCInferenceService;
using SharedMemoryMethods = Grpc::WithRawMethod_SystemSharedMemoryStatus<
    Grpc::WithRawMethod_SystemSharedMemoryRegister<Grpc::WithRawMethod_SystemSharedMemoryUnregister<
        Grpc::WithRawMethod_CudaSharedMemoryStatus<Grpc::WithRawMethod_CudaSharedMemoryRegister<
            Grpc::WithRawMethod_CudaSharedMemoryUnregister<Grpc::Service>>>>>>;
using RawService = Grpc::WithRawMethod_ServerLive<Grpc::WithRawMethod_ServerReady<
    Grpc::WithRawMethod_ModelReady<Grpc::WithRawMethod_ServerMetadata<
        Grpc::WithRawMethod_ModelMetadata<Grpc::WithRawMethod_ModelInfer<
            Grpc::WithRawMethod_ModelStreamInfer<Grpc::WithRawMethod_ModelConfig<
                Grpc::WithRawMethod_RepositoryIndex<Grpc::WithRawMethod_RepositoryModelLoad<
                    Grpc::WithRawMethod_RepositoryModelUnload<
                        Grpc::WithRawMethod_ModelStatistics<Grpc::WithRawMethod_LogSettings<
                            Grpc::WithRawMethod_TraceSetting<SharedMemoryMethods>>>>>>>>>>>>>>;

}  // namespace ferry::frontend
