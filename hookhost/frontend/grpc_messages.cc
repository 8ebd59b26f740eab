#include "hookhost/frontend/grpc_messages.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

namespace ferry::frontend {

namespace {

using google::protobuf::internal::WireFormatLite;

// Reads the value of the field `tag` introduced: fields 1-3 (model_name, model_version, id)
// when length-delimited and at most kMaxPeekValue bytes are copied to `out` as they came,
// every other field is skipped. False at the end of the bytes, a length past INT32_MAX, a
// group, or a wire type that does not exist.
bool CopyOrSkipField(uint32_t tag, google::protobuf::io::CodedInputStream& in,
                     google::protobuf::io::CodedOutputStream& out) {
  uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
  uint64_t ignored = 0;
  uint32_t length = 0;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT:
      return in.ReadVarint64(&ignored);
    case WireFormatLite::WIRETYPE_FIXED64:
      return in.Skip(8);
    case WireFormatLite::WIRETYPE_FIXED32:
      return in.Skip(4);
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
      if (!in.ReadVarint32(&length) || length > INT32_MAX) {
        return false;
      }
      if (field >= 1 && field <= 3 && length <= kMaxPeekValue) {
        std::string value;
        if (!in.ReadString(&value, static_cast<int>(length))) {
          return false;
        }
        out.WriteTag(tag);
        out.WriteVarint32(length);
        out.WriteString(value);
        return true;
      }
      return in.Skip(static_cast<int>(length));
    default:  // Groups, or not a wire type.
      return false;
  }
}

}  // namespace

void PeekInferHeader(const grpc::ByteBuffer& bytes, inference::ModelInferRequest* header) {
  header->Clear();
  grpc::ByteBuffer copy(bytes);  // The reader consumes its buffer; the slices are shared.
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  std::string kept;  // Fields 1-3 as they came, parsed below as protobuf parses them.
  {
    google::protobuf::io::StringOutputStream sink(&kept);
    google::protobuf::io::CodedOutputStream out(&sink);
    for (int i = 0; i < kMaxPeekFields; ++i) {
      uint32_t tag = in.ReadTag();
      if (tag == 0 || !CopyOrSkipField(tag, in, out)) {
        break;  // The end, not a tag, or a field that cannot be read.
      }
    }
  }  // `out` flushed into `kept`.
  if (!header->ParseFromString(kept)) {
    header->Clear();
  }
}

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
