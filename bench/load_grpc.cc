#include "bench/load_grpc.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

namespace ferry::bench {
namespace {

// One call's answer, filled in by gRPC when the call's tag comes back.
struct GrpcAnswer {
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> call;
  inference::ModelInferResponse response;
  grpc::Status status;
};

// Starts a call of `payload` on `stub` into `answer` (its earlier call done), tagged `tag`.
void Start(inference::GRPCInferenceService::Stub& stub, const Payload& payload,
           grpc::CompletionQueue* queue, GrpcAnswer& answer, void* tag) {
  answer.context = std::make_unique<grpc::ClientContext>();
  answer.context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  answer.response.Clear();
  answer.call = stub.AsyncModelInfer(answer.context.get(), payload.grpc, queue);
  answer.call->Finish(&answer.response, &answer.status, tag);
}

// Adds the answer to a call due at `due` (of payload `model`) to `level`'s samples, or its
// failure to its errors, when it was due at or after `measure_from`.
void Record(bool ok, const GrpcAnswer& answer, Clock::time_point due, size_t model,
            Clock::time_point measure_from, Level& level) {
  if (due < measure_from) {
    return;
  }
  if (!ok) {
    ++level.errors["grpc queue"];
  } else if (!answer.status.ok()) {
    ++level.errors["grpc " + std::to_string(answer.status.error_code())];
  } else {
    Sample s = GrpcSample(answer.response, due, Clock::now());
    s.model = model;
    level.samples.push_back(s);
  }
}

// The closed loop's simulated client: its channel and the call it has outstanding.
struct GrpcSlot {
  size_t index = 0;  // Its place among the in-flight calls.
  uint64_t sent = 0;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
  GrpcAnswer answer;
  Clock::time_point due;
  size_t model = 0;
};

// Starts `slot`'s next call on `queue`; its tag is the slot.
void Send(GrpcSlot& slot, const std::vector<Payload>& payloads, grpc::CompletionQueue* queue) {
  slot.model = (slot.index + slot.sent++) % payloads.size();
  slot.due = Clock::now();
  Start(*slot.stub, payloads[slot.model], queue, slot.answer, &slot);
}

// The open loop's call: one per request, as a channel may carry several at once.
struct GrpcCall {
  GrpcAnswer answer;
  Clock::time_point due;
  size_t model = 0;
};

// Shuts `queue` down and waits for what is left on it (calls gRPC ends by their deadline),
// handing each tag to `left` (the open loop's calls are its to delete).
template <typename Left>
void Drain(grpc::CompletionQueue& queue, Left left) {
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
    left(tag);
  }
}

}  // namespace

std::unique_ptr<inference::GRPCInferenceService::Stub> GrpcStub(const std::string& url) {
  // Debian's absl records every lock gRPC takes in a process-wide deadlock graph (the hook
  // host turns it off too, grpc_service.cc): a debugging aid that cost this client 2-3%.
  static std::once_flag quiet;
  std::call_once(quiet,
                 [] { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); });
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // Its own TCP connection.
  // A load generator counts every failure and retries nothing, and keeps no debugging
  // registry: the retry filter (in each call's path even with no retry policy, caching its
  // messages for a retry) and channelz cost this client 7% of its CPU per request. The
  // minimal stack would save more but drops the deadline filter that ends calls at Drain.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_ENABLE_CHANNELZ, 0);
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(url, grpc::InsecureChannelCredentials(), args));
}

Sample GrpcSample(const inference::ModelInferResponse& response, Clock::time_point due,
                  Clock::time_point done) {
  Sample s{std::chrono::duration<double, std::micro>(done - due).count(), -1, -1, -1, 0};
  const auto& params = response.parameters();
  auto total = params.find("total_server_us");
  auto compute = params.find("compute_us");
  if (total != params.end() && compute != params.end()) {
    s.overhead_us =
        static_cast<double>(total->second.int64_param() - compute->second.int64_param());
    if (auto v = params.find("validate_us"); v != params.end()) {
      s.validate_us = static_cast<double>(v->second.int64_param());
    }
    if (auto q = params.find("queue_us"); q != params.end()) {
      s.queue_us = static_cast<double>(q->second.int64_param());
    }
  }
  if (auto batch = params.find("batch_size"); batch != params.end()) {
    s.batch = batch->second.int64_param();
  }
  return s;
}

Level RunGrpcClosedLoop(const std::string& url, const std::vector<Payload>& payloads, int in_flight,
                        int threads, double seconds, double warmup) {
  Level level{.mode = "concurrency", .offered = static_cast<double>(in_flight), .seconds = seconds};
  auto measure_from = After(Clock::now(), warmup);
  auto end = After(measure_from, seconds);
  std::mutex mu;
  std::vector<std::thread> pool;
  threads = std::min(threads, in_flight);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      grpc::CompletionQueue queue;
      std::vector<GrpcSlot> slots;
      for (int i = t; i < in_flight; i += threads) {
        GrpcSlot& slot = slots.emplace_back();
        slot.index = static_cast<size_t>(i);
        slot.stub = GrpcStub(url);
      }
      for (GrpcSlot& slot : slots) {
        Send(slot, payloads, &queue);
      }
      Level mine;
      size_t outstanding = slots.size();
      void* tag = nullptr;
      bool ok = false;
      while (outstanding > 0 && queue.Next(&tag, &ok)) {
        auto& slot = *static_cast<GrpcSlot*>(tag);
        Record(ok, slot.answer, slot.due, slot.model, measure_from, mine);
        if (Clock::now() < end) {
          Send(slot, payloads, &queue);
        } else {
          --outstanding;
        }
      }
      Drain(queue, [](void*) {});  // The slots own their calls.
      std::lock_guard<std::mutex> lock(mu);
      level.samples.insert(level.samples.end(), mine.samples.begin(), mine.samples.end());
      for (const auto& [what, n] : mine.errors) {
        level.errors[what] += n;
      }
    });
  }
  for (std::thread& t : pool) {
    t.join();
  }
  return level;
}

Level RunGrpcOpenLoop(const std::string& url, const std::vector<Payload>& payloads, double rate,
                      int connections, double seconds, double warmup) {
  Level level{.mode = "rate", .offered = rate, .seconds = seconds};
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs;
  for (int i = 0; i < connections; ++i) {
    stubs.push_back(GrpcStub(url));
  }
  grpc::CompletionQueue queue;
  auto start = Clock::now();
  auto measure_from = After(start, warmup);
  auto end = After(measure_from, seconds);
  std::atomic<uint64_t> started{0};
  std::atomic<bool> sent_all{false};
  // Requests start on a thread of their own, each at its due time: a wait for an answer with
  // a deadline would wake late, since gRPC keeps deadlines in whole milliseconds.
  std::thread sender([&] {
    prctl(PR_SET_TIMERSLACK, 1UL);  // Wake at the due time, not up to 50 us after.
    for (uint64_t k = 0;; ++k) {
      auto due = After(start, static_cast<double>(k) / rate);
      if (due >= end) {
        break;
      }
      std::this_thread::sleep_until(due);  // Late already: at once.
      auto* call = new GrpcCall{{}, due, k % payloads.size()};
      Start(*stubs[k % stubs.size()], payloads[call->model], &queue, call->answer, call);
      started.fetch_add(1, std::memory_order_relaxed);
    }
    sent_all.store(true, std::memory_order_release);
  });
  // Answers, on this thread, until every request started is answered (gRPC ends each by its
  // 30 s deadline at the latest).
  uint64_t answered = 0;
  while (!sent_all.load(std::memory_order_acquire) ||
         answered < started.load(std::memory_order_relaxed)) {
    void* tag = nullptr;
    bool ok = false;
    auto poll = std::chrono::system_clock::now() + std::chrono::milliseconds(10);
    if (queue.AsyncNext(&tag, &ok, poll) != grpc::CompletionQueue::GOT_EVENT) {
      continue;  // Nothing yet: look again whether the sender is done.
    }
    std::unique_ptr<GrpcCall> call(static_cast<GrpcCall*>(tag));
    Record(ok, call->answer, call->due, call->model, measure_from, level);
    ++answered;
  }
  sender.join();
  Drain(queue, [](void* tag) { delete static_cast<GrpcCall*>(tag); });
  return level;
}

}  // namespace ferry::bench
