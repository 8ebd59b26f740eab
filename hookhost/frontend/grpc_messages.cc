#include "hookhost/frontend/grpc_messages.h"

namespace ferry::frontend {

grpc::Status ToGrpc(const Error& e) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case ErrorCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case ErrorCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case ErrorCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case ErrorCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case ErrorCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
    case ErrorCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case ErrorCode::kUnauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case ErrorCode::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
  }
  return grpc::Status(code, e.message);
}

}  // namespace ferry::frontend
