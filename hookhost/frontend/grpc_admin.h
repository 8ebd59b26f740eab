// The gRPC service's administrative methods, over the same calls as HTTP's
// (kserve_service.h): a model's metadata and configuration, LogSettings (the logging extension) and
// RepositoryModelLoad / Unload (the repository extension, docs/frontend.md "Repository"), and the
// authorization every method of the service checks first.
//
// Thread safety: any thread calls these (the queue's or the call lane's, grpc_calls.h); a load
// or unload is finished later, from the RepositoryControl's thread (no thread waits for it).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string_view>

#include "hookhost/frontend/grpc_calls.h"
#include "hookhost/frontend/kserve_service.h"
#include "hookhost/frontend/proto/inference.pb.h"
#include "shm/repository_mailbox.h"

namespace ferry::frontend {

// The call's "authorization" metadata (and its TLS subject) checked for `endpoint` on
// `model` (auth.h). `kserve` null: a service for connection tests alone, tenant 0.
Result<uint32_t> AuthorizeCall(const KServeService* kserve, const grpc::ServerContextBase& call,
                               Endpoint endpoint, std::string_view model);

// ModelMetadata's answer for the model `m` (found and authorized): its name, the versions
// `kserve` serves, its client inputs and outputs.
void DescribeModel(const KServeService& kserve, const Manifest& m,
                   inference::ModelMetadataResponse* out);
// ModelConfig's answer for `m`, in Triton's terms: max_batch_size (0 for a model without a
// batch dimension) and each tensor's dims without the batch dimension.
void DescribeConfig(const Manifest& m, inference::ModelConfig* out);

// LogSettings: no settings asks for the node's; some change them (an admin's).
void LogSettingsMethod(KServeService* kserve, UnaryCall& call);

// TraceSetting: no settings asks for the node's (a model's name: the same, the node's apply
// to every model); some change them (an admin's, the node's only).
void TraceSettingMethod(KServeService* kserve, UnaryCall& call);

// RepositoryModelLoad (kLoad) or RepositoryModelUnload (kUnload): an admin's; finished when
// ferryd answers.
void RepositoryChangeMethod(KServeService* kserve, shm::RepositoryOp op, UnaryCall& call);

// The shared-memory extensions' six methods by name ("SystemSharedMemoryStatus",
// "...Register", "...Unregister", "CudaSharedMemory..."), with HTTP's rules
// (shared_memory_http.h): a caller's own regions; CUDA registration refused.
void SharedMemoryMethod(KServeService* kserve, std::string_view method, UnaryCall& call);

}  // namespace ferry::frontend
