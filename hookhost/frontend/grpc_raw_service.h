// The generated KServe v2 gRPC service with every method taken as raw bytes
// (grpc_service.cc implements them).
//
// Every method takes its message as bytes and parses it itself (ReadMessage), so that a
// message that is not valid protobuf is answered INVALID_ARGUMENT with what was wrong: the
// generated handlers answer UNIMPLEMENTED with no detail, which reads as a missing method.
#pragma once

#include "hookhost/frontend/proto/inference.grpc.pb.h"

namespace ferry::frontend {

using Grpc = inference::GRPCInferenceService;
using SharedMemoryMethods = Grpc::WithRawCallbackMethod_SystemSharedMemoryStatus<
    Grpc::WithRawCallbackMethod_SystemSharedMemoryRegister<
        Grpc::WithRawCallbackMethod_SystemSharedMemoryUnregister<
            Grpc::WithRawCallbackMethod_CudaSharedMemoryStatus<
                Grpc::WithRawCallbackMethod_CudaSharedMemoryRegister<
                    Grpc::WithRawCallbackMethod_CudaSharedMemoryUnregister<Grpc::Service>>>>>>;
using RawService = Grpc::WithRawCallbackMethod_ServerLive<
    Grpc::WithRawCallbackMethod_ServerReady<Grpc::WithRawCallbackMethod_ModelReady<
        Grpc::WithRawCallbackMethod_ServerMetadata<Grpc::WithRawCallbackMethod_ModelMetadata<
            Grpc::WithRawCallbackMethod_ModelInfer<Grpc::WithRawCallbackMethod_ModelStreamInfer<
                Grpc::WithRawCallbackMethod_ModelConfig<Grpc::WithRawCallbackMethod_RepositoryIndex<
                    Grpc::WithRawCallbackMethod_RepositoryModelLoad<
                        Grpc::WithRawCallbackMethod_RepositoryModelUnload<
                            Grpc::WithRawCallbackMethod_ModelStatistics<
                                Grpc::WithRawCallbackMethod_LogSettings<
                                    Grpc::WithRawCallbackMethod_TraceSetting<
                                        SharedMemoryMethods>>>>>>>>>>>>>>;

}  // namespace ferry::frontend
