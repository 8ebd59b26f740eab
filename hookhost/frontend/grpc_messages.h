// What the gRPC service shares about messages and statuses: an Error as a gRPC status of the
// same name, and messages read from and written to the raw bytes the service's methods take.
//
// Thread safety: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "common/result.h"
#include "hookhost/frontend/grpc_calls.h"

namespace ferry::frontend {

// INVALID_ARGUMENT -> INVALID_ARGUMENT, NOT_FOUND -> NOT_FOUND, ... (same names).
grpc::Status ToGrpc(const Error& e);

// `bytes` parsed into `message`. INVALID_ARGUMENT naming the message type and its size.
template <typename Message>
grpc::Status ReadMessage(const grpc::ByteBuffer& bytes, Message* message) {
  grpc::ByteBuffer copy(bytes);  // Deserialize consumes its buffer; the slices are shared.
  if (!grpc::SerializationTraits<Message>::Deserialize(&copy, message).ok()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "the " + std::to_string(bytes.Length()) +
                                                    "-byte message is not a valid " +
                                                    message->GetTypeName()};
  }
  return grpc::Status::OK;
}

// A ModelInferRequest's model_name, model_version and id, read from its top-level fields alone
// (its tensors skipped, not parsed) into `header`: for counting and answering a request refused
// before it is parsed (a flood past the offload bound, a drain), at a cost that does not grow
// with its tensors. Reads at most kMaxPeekFields fields; bytes that do not scan as fields end
// the scan, and a value longer than kMaxPeekValue is skipped. What is kept is parsed as
// protobuf would (a string that is not UTF-8 is refused), so `header` is empty of what could
// not be read. Never reads past `bytes`.
inline constexpr int kMaxPeekFields = 64;
inline constexpr uint32_t kMaxPeekValue = 1024;
void PeekInferHeader(const grpc::ByteBuffer& bytes, inference::ModelInferRequest* header);

// `message` serialized into `bytes` (emptied first: a stream reuses its buffer).
template <typename Message>
grpc::Status WriteMessage(const Message& message, grpc::ByteBuffer* bytes) {
  bytes->Clear();
  bool own = false;
  return grpc::SerializationTraits<Message>::Serialize(message, bytes, &own);
}

// Answers a unary call inline: its request parsed from the call's bytes, `fn(&request,
// &response)` fills the response and returns the call's status, the response serialized.
template <typename Request, typename Response, typename Fn>
void ReplyInline(UnaryCall& call, Fn&& fn) {
  Request request;
  Response response;
  grpc::Status status = ReadMessage(call.request_bytes(), &request);
  if (status.ok()) {
    status = fn(&request, &response);
  }
  if (status.ok()) {
    status = WriteMessage(response, call.response_bytes());
  }
  call.Finish(status);
}

}  // namespace ferry::frontend
