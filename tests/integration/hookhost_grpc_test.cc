// gRPC's front end over a hook host and real worker processes: gRPC's one queue thread serves
// every call of the hook host, so a large ModelInfer (one request or one of a stream's) is
// parsed on a hook thread, as HTTP's large bodies are, and a small one on the queue thread,
// where parsing costs less than the hand-off would.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "hookhost/frontend/grpc_front_end.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"
#include "tests/testing/flow_node.h"
#include "tests/testing/hold_thread.h"
#include "tests/testing/loopback.h"

namespace ferry::hookhost {
namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

// A ModelInfer for mlp of `rows` rows of 784 FP32 values (i % 7 - 3), with `extra` bytes
// more in its raw contents than the shape holds when not 0 (so it is refused when parsed).
ModelInferRequest MlpRequest(int64_t rows, size_t extra = 0) {
  ModelInferRequest r;
  r.set_model_name("mlp");
  auto* input = r.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  input->add_shape(rows);
  input->add_shape(784);
  std::string bytes(static_cast<size_t>(rows) * 784 * 4 + extra, '\0');
  for (size_t i = 0; i < static_cast<size_t>(rows) * 784; ++i) {
    float v = static_cast<float>(static_cast<int>(i % 7) - 3);
    std::memcpy(bytes.data() + i * 4, &v, 4);
  }
  r.add_raw_input_contents(std::move(bytes));
  return r;
}

// The first row of a response's logits, as bytes.
std::vector<uint8_t> FirstRow(const ModelInferResponse& response) {
  REQUIRE(response.raw_output_contents_size() == 1);
  const std::string& raw = response.raw_output_contents(0);
  REQUIRE(raw.size() >= 10 * sizeof(float));
  return {raw.begin(), raw.begin() + 10 * sizeof(float)};
}

// Equal within the rounding of another GEMM blocking (a batch of 1 against one of 32).
bool SameRow(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  return SameFloats(got, want);
}

// A hook host with one hook thread behind a gRPC front end on a free loopback port.
struct GrpcNode {
  FlowNode node{1};
  Host host{node, GatewayMode::kLeastOutstanding, 1};
  frontend::KServeService service{host.view, host.models, host.host.get(), FrontendSettings{}};
  uint16_t port = 0;
  frontend::GrpcFrontEnd front{&service, testing::ListenLoopback(&port), frontend::GrpcOptions{}};
  std::unique_ptr<GRPCInferenceService::Stub> stub;

  GrpcNode() {
    REQUIRE(front.Start().ok());
    stub = GRPCInferenceService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                             grpc::InsecureChannelCredentials()));
  }

  // Holds the hook thread until the returned promise is set (or destroyed).
  std::promise<void> HoldHookThread() {
    return testing::HoldThread([this](auto task) { host.host->RunOnHookThread(std::move(task)); });
  }

  grpc::Status Call(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->ModelInfer(&context, request, response);
  }
};

constexpr size_t kLargeRows = frontend::KServeService::kInlineParseBytes / (784 * 4) + 1;

TEST_CASE("a large gRPC ModelInfer is parsed on a hook thread, a small one on the queue thread") {
  GrpcNode n;
  ModelInferResponse small_ok, large_ok;
  REQUIRE(n.Call(MlpRequest(1), &small_ok).ok());
  REQUIRE(n.Call(MlpRequest(kLargeRows), &large_ok).ok());
  CHECK(SameRow(FirstRow(small_ok), FirstRow(large_ok)));  // Served the same on either thread.

  std::promise<void> release = n.HoldHookThread();
  // A small request the codec refuses is answered from the queue thread at once.
  ModelInferResponse refused;
  grpc::Status small = n.Call(MlpRequest(1, 4), &refused);
  CHECK(small.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  // A large one waits for the hook thread to parse it.
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  ModelInferResponse large_refused;
  grpc::Status large;
  auto call = n.stub->AsyncModelInfer(&context, MlpRequest(kLargeRows, 4), &queue);
  call->Finish(&large_refused, &large, &queue);
  void* tag = nullptr;
  bool ok = false;
  auto early =
      queue.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  CHECK(early == grpc::CompletionQueue::TIMEOUT);
  release.set_value();
  if (early == grpc::CompletionQueue::TIMEOUT) {
    REQUIRE(queue.Next(&tag, &ok));
  }
  CHECK(large.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(large.error_message().find("raw_input_contents holds") != std::string::npos);
}

TEST_CASE("a large request of a gRPC stream is parsed on a hook thread and answered in order") {
  GrpcNode n;
  grpc::ClientContext context;
  auto stream = n.stub->ModelStreamInfer(&context);
  inference::ModelStreamInferResponse answer;
  REQUIRE(stream->Write(MlpRequest(1)));
  REQUIRE(stream->Read(&answer));
  REQUIRE(answer.error_message().empty());
  std::vector<uint8_t> small_row = FirstRow(answer.infer_response());

  std::promise<void> release = n.HoldHookThread();
  // Refused by the codec, but only once the hook thread has parsed it.
  REQUIRE(stream->Write(MlpRequest(kLargeRows, 4)));
  REQUIRE(stream->Write(MlpRequest(1)));  // Read only once the large one is answered.
  std::future<bool> first = std::async(std::launch::async, [&] { return stream->Read(&answer); });
  CHECK(first.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  release.set_value();
  REQUIRE(first.get());
  CHECK(answer.error_message().find("raw_input_contents holds") != std::string::npos);
  REQUIRE(stream->Read(&answer));
  CHECK(answer.error_message().empty());
  CHECK(SameRow(FirstRow(answer.infer_response()), small_row));
  stream->WritesDone();
  CHECK(stream->Finish().ok());
}

TEST_CASE("large gRPC requests past kMaxOffloaded waiting to be parsed are refused at once") {
  GrpcNode n;
  std::promise<void> release = n.HoldHookThread();
  constexpr int kMax = frontend::KServeService::kMaxOffloaded;
  struct Waiting {
    grpc::ClientContext context;
    ModelInferResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<ModelInferResponse>> call;
  };
  std::vector<std::unique_ptr<Waiting>> waiting;
  grpc::CompletionQueue queue;
  ModelInferRequest large = MlpRequest(kLargeRows);
  for (int i = 0; i < kMax; ++i) {
    auto w = std::make_unique<Waiting>();
    w->call = n.stub->AsyncModelInfer(&w->context, large, &queue);
    w->call->Finish(&w->response, &w->status, w.get());
    waiting.push_back(std::move(w));
  }
  for (int i = 0; i < 1000 && n.service.offloaded() < kMax; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(n.service.offloaded() == kMax);
  ModelInferResponse response;
  grpc::Status refused = n.Call(large, &response);  // The hook thread is still held.
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(refused.error_message().find("wait to be parsed") != std::string::npos);
  size_t exhausted = static_cast<size_t>(ErrorCode::kResourceExhausted) + 1;
  shm::FrontEndCountersData& counters = n.node.segment.frontend_counters(0);
  const HookModel* mlp = n.service.Find("mlp");
  REQUIRE(mlp != nullptr);
  std::atomic<uint64_t>& mlp_exhausted = counters.models[mlp->index][0].answered[exhausted];
  CHECK(mlp_exhausted.load() == 1);  // Counted under its model, read unparsed.
  CHECK(counters.unrouted[exhausted].load() == 0);
  // A stream's large request too, and unparsed: a flood is not parsed on the queue thread.
  grpc::ClientContext stream_context;
  auto stream = n.stub->ModelStreamInfer(&stream_context);
  ModelInferRequest named = large;
  named.set_id("large-9");
  REQUIRE(stream->Write(named));
  inference::ModelStreamInferResponse answer;
  REQUIRE(stream->Read(&answer));
  CHECK(answer.error_message().find("wait to be parsed") != std::string::npos);
  CHECK(answer.infer_response().id() == "large-9");  // Matched to its request by id.
  CHECK(answer.infer_response().model_name() == "mlp");
  CHECK(mlp_exhausted.load() == 2);
  stream->WritesDone();
  CHECK(stream->Finish().ok());
  release.set_value();
  int served = 0;
  for (int i = 0; i < kMax; ++i) {
    void* tag = nullptr;
    bool ok = false;
    REQUIRE(queue.Next(&tag, &ok));
    served += static_cast<Waiting*>(tag)->status.ok() ? 1 : 0;
  }
  CHECK(served == kMax);
  CHECK(n.service.offloaded() == 0);
  CHECK(n.Call(large, &response).ok());
}

// While draining, a large request is answered in place: the hook threads may be gone.
TEST_CASE("a large gRPC ModelInfer sent while the hook host drains is answered UNAVAILABLE") {
  GrpcNode n;
  std::promise<void> release = n.HoldHookThread();  // Not needed for the answer.
  n.service.SetDraining();
  ModelInferResponse response;
  grpc::Status large = n.Call(MlpRequest(kLargeRows), &response);
  CHECK(large.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(large.error_message().find("draining") != std::string::npos);
  grpc::ClientContext context;
  auto stream = n.stub->ModelStreamInfer(&context);
  inference::ModelStreamInferResponse answer;
  ModelInferRequest named = MlpRequest(kLargeRows);
  named.set_id("large-7");
  REQUIRE(stream->Write(named));
  REQUIRE(stream->Read(&answer));
  CHECK(answer.error_message().find("draining") != std::string::npos);
  CHECK(answer.infer_response().id() == "large-7");  // Matched to its request by id.
  stream->WritesDone();
  CHECK(stream->Finish().ok());
  release.set_value();
}

}  // namespace
}  // namespace ferry::hookhost
