// The hook host's request flow through real ferry-worker processes: this test is the
// supervisor (segment, fork + exec of the workers, ResetSlot of the dead) and runs a HookHost
// in process on hook host slot 0, as the front end will. Outputs are compared with CpuBackend
// run directly.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <thread>

#include "hookhost/frontend/front_end.h"
#include "net/http_client.h"
#include "tests/testing/flow_node.h"
#include "tests/testing/hold_thread.h"

namespace ferry::hookhost {
namespace {

TEST_CASE("requests flow through a hook host to worker processes and come back exact") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding);
  Direct direct(node.repository());
  std::mt19937 rng(5);
  struct Sent {
    uint32_t model;
    int64_t rows;
    std::vector<uint8_t> input;
    std::future<Result<InferResponse>> response;
  };
  std::vector<Sent> sent;
  for (int i = 0; i < 300; ++i) {
    bool cnn = i % 4 == 0;
    int64_t rows = 1 + static_cast<int64_t>(rng() % 6);
    Sent s{cnn ? kCnn : kMlp,
           rows,
           RandomFloats(static_cast<size_t>(rows) * (cnn ? 3 * 32 * 32 : 784), rng),
           {}};
    Shape shape = cnn ? Shape{rows, 3, 32, 32} : Shape{rows, 784};
    s.response = host.host->Submit(
        Request(*host.host, cnn ? "cnn" : "mlp", shape, s.input, cnn ? "image" : "input"));
    sent.push_back(std::move(s));
  }
  int wrong = 0;
  for (Sent& s : sent) {
    Result<InferResponse> r = Get(s.response);
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    REQUIRE(r->outputs.size() == 1);
    CHECK(r->outputs[0].shape == Shape{s.rows, 10});
    CHECK(r->outputs[0].name == (s.model == kCnn ? "probs" : "logits"));
    wrong += SameFloats(r->outputs[0].bytes, direct.Run(s.model, s.rows, s.input, 10)) ? 0 : 1;
    CHECK(r->timings.pieces == 1);
    CHECK(r->timings.batch_size >= s.rows);
    CHECK(r->timings.compute_ns > 0);
    CHECK(r->timings.total_ns >= r->timings.compute_ns);
  }
  CHECK(wrong == 0);
  CHECK(host.host->pending() == 0);
  CheckArenasEmpty(node, host);
}

TEST_CASE("one request at a time and bursts, from three threads at once, come back exact") {
  // One at a time, the hook host idle in between: the submitting thread sends each request
  // itself under the transport token, and the transport thread polls for its answer ([hooks]
  // spin_us). Bursts: the transport thread sends them. Both at once: the token changes hands
  // between them throughout.
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding, 2, 200'000);
  Direct direct(node.repository());
  struct Done {
    int64_t rows;
    std::vector<uint8_t> input;
    Result<InferResponse> response;
  };
  auto sequential = [&](uint32_t seed, int n, std::vector<Done>* done) {
    std::mt19937 rng(seed);
    for (int i = 0; i < n; ++i) {
      int64_t rows = 1 + static_cast<int64_t>(rng() % 3);
      std::vector<uint8_t> input = RandomFloats(static_cast<size_t>(rows) * 784, rng);
      std::future<Result<InferResponse>> f =
          host.host->Submit(Request(*host.host, "mlp", {rows, 784}, input, "input"));
      done->push_back({rows, std::move(input), f.get()});
    }
  };
  auto bursts = [&](uint32_t seed, int n, std::vector<Done>* done) {
    std::mt19937 rng(seed);
    for (int b = 0; b < n; ++b) {
      std::vector<std::pair<Done, std::future<Result<InferResponse>>>> burst;
      for (int i = 0; i < 20; ++i) {
        int64_t rows = 1 + static_cast<int64_t>(rng() % 3);
        std::vector<uint8_t> input = RandomFloats(static_cast<size_t>(rows) * 784, rng);
        auto f = host.host->Submit(Request(*host.host, "mlp", {rows, 784}, input, "input"));
        burst.push_back({Done{rows, std::move(input), Internal("unanswered")}, std::move(f)});
      }
      for (auto& [d, f] : burst) {
        d.response = f.get();
        done->push_back(std::move(d));
      }
    }
  };
  std::vector<Done> alone;
  sequential(1, 100, &alone);  // Nothing else running.
  std::vector<Done> a, b, c;
  std::thread ta(sequential, 2, 150, &a);
  std::thread tb(bursts, 3, 8, &b);
  std::thread tc(sequential, 4, 150, &c);
  ta.join();
  tb.join();
  tc.join();
  int wrong = 0;
  size_t answered = 0;
  for (std::vector<Done>* done : {&alone, &a, &b, &c}) {
    for (Done& d : *done) {
      REQUIRE_MESSAGE(d.response.ok(), d.response.error().message);
      wrong += SameFloats(d.response->outputs.at(0).bytes, direct.Run(kMlp, d.rows, d.input, 10))
                   ? 0
                   : 1;
      CHECK(d.response->timings.total_ns >= d.response->timings.compute_ns);
      ++answered;
    }
  }
  CHECK(answered == 100 + 150 + 160 + 150);
  CHECK(wrong == 0);
  CHECK(host.host->pending() == 0);
  CheckArenasEmpty(node, host);
}

TEST_CASE("a request of three times the largest compiled size is split and joined exactly") {
  FlowNode node(1);
  Host host(node, GatewayMode::kRoundRobin);
  Direct direct(node.repository());
  std::mt19937 rng(7);
  const int64_t largest = 32;  // mlp's sizes end at 32.
  std::vector<uint8_t> input = RandomFloats(3 * largest * 784, rng);
  Result<InferResponse> whole =
      Get(host.host->Submit(Request(*host.host, "mlp", {3 * largest, 784}, input, "input")));
  REQUIRE_MESSAGE(whole.ok(), (whole.ok() ? "" : whole.error().message));
  CHECK(whole->timings.pieces == 3);
  CHECK(whole->outputs[0].shape == Shape{3 * largest, 10});
  // The same rows as three separate requests.
  std::vector<uint8_t> joined;
  for (int k = 0; k < 3; ++k) {
    std::vector<uint8_t> part(input.begin() + k * largest * 784 * 4,
                              input.begin() + (k + 1) * largest * 784 * 4);
    Result<InferResponse> piece =
        Get(host.host->Submit(Request(*host.host, "mlp", {largest, 784}, part, "input")));
    REQUIRE(piece.ok());
    CHECK(piece->timings.pieces == 1);
    joined.insert(joined.end(), piece->outputs[0].bytes.begin(), piece->outputs[0].bytes.end());
  }
  CHECK(whole->outputs[0].bytes == joined);
  CHECK(SameFloats(whole->outputs[0].bytes, direct.Run(kMlp, 3 * largest, input, 10)));
  // An uneven split: 70 rows = 32 + 32 + 6.
  std::vector<uint8_t> uneven = RandomFloats(70 * 784, rng);
  Result<InferResponse> r =
      Get(host.host->Submit(Request(*host.host, "mlp", {70, 784}, uneven, "input")));
  REQUIRE(r.ok());
  CHECK(r->timings.pieces == 3);
  CHECK(SameFloats(r->outputs[0].bytes, direct.Run(kMlp, 70, uneven, 10)));
}

TEST_CASE("what the manifest refuses is answered at once, naming the input and what it expects") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding);
  std::vector<uint8_t> bytes(2 * 784 * 4);
  auto error_of = [&](InferRequest r) {
    Result<InferResponse> got = Get(host.host->Submit(std::move(r)));
    REQUIRE_FALSE(got.ok());
    return got.error();
  };
  Error unknown = error_of(Request(*host.host, "nope", {2, 784}, bytes, "input"));
  CHECK(unknown.code == ErrorCode::kNotFound);
  CHECK(unknown.message == "the request names a model this hook host does not serve");
  Error broken = error_of(Request(*host.host, "broken", {2, 784}, bytes, "input"));
  CHECK(broken.code == ErrorCode::kUnavailable);
  CHECK(broken.message.find("model 'broken' failed to load") != std::string::npos);
  Error shape =
      error_of(Request(*host.host, "mlp", {2, 783}, std::vector<uint8_t>(2 * 783 * 4), "input"));
  CHECK(shape.code == ErrorCode::kInvalidArgument);
  CHECK(shape.message == "model 'mlp': input 'input': expected FP32 [-1, 784], got FP32 [2, 783]");
  InferRequest dtype = Request(*host.host, "mlp", {2, 784}, bytes, "input");
  dtype.inputs[0].dtype = DType::kF64;
  CHECK(error_of(dtype).message.find("expected FP32 [-1, 784], got FP64 [2, 784]") !=
        std::string::npos);
  Error short_bytes =
      error_of(Request(*host.host, "mlp", {2, 784}, std::vector<uint8_t>(100), "input"));
  CHECK(short_bytes.message ==
        "model 'mlp': input 'input': 100 bytes given, FP32 [2, 784] has 6272");
  Error name = error_of(Request(*host.host, "mlp", {2, 784}, bytes, "x"));
  CHECK(name.message == "model 'mlp': unknown input 'x'");
  InferRequest none;
  none.model = host.host->Find("mlp");
  CHECK(error_of(none).message == "model 'mlp': missing input 'input'");
  InferRequest twice = Request(*host.host, "mlp", {2, 784}, bytes, "input");
  twice.inputs.push_back(twice.inputs[0]);
  CHECK(error_of(twice).message == "model 'mlp': input 'input' is given twice");
  Error zero_rows = error_of(Request(*host.host, "mlp", {0, 784}, {}, "input"));
  CHECK(zero_rows.message.find("0 rows; 1 to 1048576 are accepted") != std::string::npos);
  // The cnn's variants are named when no variant matches.
  Error variant = error_of(
      Request(*host.host, "cnn", {1, 3, 16, 16}, std::vector<uint8_t>(3 * 16 * 16 * 4), "image"));
  CHECK(variant.message.find("no shape variant matches: default, large") != std::string::npos);
  // And the "large" variant is served.
  Result<InferResponse> large = Get(host.host->Submit(
      Request(*host.host, "cnn", {1, 3, 64, 64}, std::vector<uint8_t>(3 * 64 * 64 * 4), "image")));
  REQUIRE_MESSAGE(large.ok(), (large.ok() ? "" : large.error().message));
  CHECK(large->outputs[0].shape == Shape{1, 10});
  // A deadline already past.
  InferRequest late = Request(*host.host, "mlp", {2, 784}, bytes, "input");
  late.deadline_ns = MonotonicNs() - 1;
  CHECK(error_of(late).code == ErrorCode::kDeadlineExceeded);
}

// What one HTTP infer answers, and on which thread.
struct Answered {
  net::HttpResponse response;
  std::thread::id thread;
};

Answered Infer(frontend::KServeService& service, std::string body, bool gzip,
               const std::string& model = "mlp", const char* header_length = nullptr) {
  net::HttpRequest request;
  request.method = "POST";
  request.target = "/v2/models/" + model + "/infer";
  if (header_length != nullptr) {
    request.headers.emplace_back("Inference-Header-Content-Length", header_length);
  }
  if (gzip) {
    request.headers.emplace_back("Content-Encoding", "gzip");
    body = net::Deflate(body, net::Encoding::kGzip);
  }
  request.body = std::move(body);
  std::promise<Answered> answered;
  service.Handle(std::move(request), [&](net::HttpResponse r) {
    answered.set_value({std::move(r), std::this_thread::get_id()});
  });
  return answered.get_future().get();
}

// Parsing a small body costs less than a hand-off; a large or compressed one (a gzip bomb
// inflates 1000-fold) must not hold the I/O thread, which serves every other connection.
TEST_CASE("a large or compressed JSON body is parsed on a hook thread, a small one inline") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding);
  FrontendSettings settings;
  settings.max_request_bytes = 4 << 20;
  frontend::KServeService service(host.view, host.models, host.host.get(), settings);
  std::string row;
  for (int i = 0; i < 784; ++i) {
    row += (i == 0 ? "" : ",") + std::to_string(i % 7 - 3);
  }
  std::string valid =
      R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[)" + row + "]}]}";
  std::string broken = valid.substr(0, valid.size() - 2);
  std::string padded = R"({"pad":")" +
                       std::string(frontend::KServeService::kInlineParseBytes, 'x') + "\"," +
                       broken.substr(1);
  std::thread::id here = std::this_thread::get_id();

  Answered small = Infer(service, broken, false);
  CHECK(small.response.status == 400);
  CHECK(small.thread == here);
  Answered large = Infer(service, padded, false);
  CHECK(large.response.status == 400);
  CHECK(large.thread != here);
  Answered compressed = Infer(service, broken, true);
  CHECK(compressed.response.status == 400);
  CHECK(compressed.thread != here);
  // Served the same whichever thread parsed it.
  Answered inline_ok = Infer(service, valid, false);
  Answered offloaded_ok = Infer(service, valid, true);
  REQUIRE(inline_ok.response.status == 200);
  REQUIRE(offloaded_ok.response.status == 200);
  auto logits = [](const std::string& body) {
    return nlohmann::json::parse(body)["outputs"][0]["data"];
  };
  CHECK(logits(inline_ok.response.body) == logits(offloaded_ok.response.body));
  CHECK(logits(inline_ok.response.body).size() == 10);
  // A compression bomb within max_request_bytes (3 MiB of JSON zeros, a few KB gzipped) is
  // refused at the inflate ratio, 413, before any of it is parsed.
  std::string zeros(3 << 20, '0');
  for (size_t i = 1; i < zeros.size(); i += 2) zeros[i] = ',';
  std::string bomb =
      R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[)" + zeros + "0]}]}";
  Answered refused = Infer(service, bomb, true);
  CHECK(refused.response.status == 413);
  CHECK(refused.response.body.find("max_inflate_ratio") != std::string::npos);
}

// A flood of large or compressed bodies is bounded where it waits for the hook threads: past
// kMaxOffloaded waiting, a body is refused at once, on the I/O thread, unparsed.
TEST_CASE("bodies past kMaxOffloaded waiting for a hook thread are refused at once") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding, 1);
  // Outlive the service, whose destructor waits for the tasks that set them.
  std::atomic<int> answered{0}, served{0};
  std::optional<net::HttpResponse> refused;
  FrontendSettings settings;
  frontend::KServeService service(host.view, host.models, host.host.get(), settings);
  std::promise<void> release =
      testing::HoldThread([&](auto task) { host.host->RunOnHookThread(std::move(task)); });
  std::string row;
  for (int i = 0; i < 784; ++i) {
    row += (i == 0 ? "" : ",") + std::to_string(i % 7 - 3);
  }
  std::string body =
      R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[)" + row + "]}]}";
  auto send = [&](std::function<void(net::HttpResponse)> done) {
    net::HttpRequest request;
    request.method = "POST";
    request.target = "/v2/models/mlp/infer";
    request.headers.emplace_back("Content-Encoding", "gzip");  // Parsed on a hook thread.
    request.body = net::Deflate(body, net::Encoding::kGzip);
    service.Handle(std::move(request), std::move(done));
  };
  for (int i = 0; i < frontend::KServeService::kMaxOffloaded; ++i) {
    send([&](net::HttpResponse r) {
      served += r.status == 200 ? 1 : 0;
      answered += 1;
    });
  }
  CHECK(service.offloaded() == frontend::KServeService::kMaxOffloaded);
  send([&](net::HttpResponse r) { refused = std::move(r); });
  REQUIRE(refused.has_value());  // Answered in place, the hook thread still held.
  CHECK(refused->status != 200);
  CHECK(refused->body.find("wait to be parsed") != std::string::npos);
  CHECK(answered.load() == 0);
  size_t exhausted = static_cast<size_t>(ErrorCode::kResourceExhausted) + 1;
  CHECK(node.segment.frontend_counters(0).models[kMlp][0].answered[exhausted].load() == 1);
  release.set_value();
  for (int i = 0; i < 3000 && answered.load() < frontend::KServeService::kMaxOffloaded; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(served.load() == frontend::KServeService::kMaxOffloaded);
  CHECK(service.offloaded() == 0);
}

// The hook thread that parsed a large body hands its answer over and only then leaves the
// service: a caller destroying the service as soon as it has the answer must not pull it from
// under that thread (under the sanitizers a use after scope, seen once in CI).
TEST_CASE("a service destroyed as its offloaded answer is handed over waits for the parse") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding);
  FrontendSettings settings;
  auto service =
      std::make_unique<frontend::KServeService>(host.view, host.models, host.host.get(), settings);
  net::HttpRequest request;
  request.method = "POST";
  request.target = "/v2/models/mlp/infer";
  request.headers.emplace_back("Content-Encoding", "gzip");  // Compressed: parsed off-thread.
  request.body = net::Deflate("{", net::Encoding::kGzip);
  std::promise<int> answered;
  std::atomic<bool> returned{false};
  service->Handle(std::move(request), [&](net::HttpResponse r) {
    answered.set_value(r.status);
    // The caller is free from here; this thread still has to leave the service.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    returned = true;
  });
  CHECK(answered.get_future().get() == 400);
  service.reset();  // Waits for the hook thread to leave.
  CHECK(returned.load());
}

// A model whose bundle failed to load in the hook host has no manifest: every way of sending
// it a request is answered 503 naming the failure (the HTTP path once read the missing
// manifest for the answer's version and a raw body's input, and the hook host crashed).
TEST_CASE("an infer for a model that failed to load is answered 503 in every encoding") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding);
  FrontendSettings settings;
  frontend::KServeService service(host.view, host.models, host.host.get(), settings);
  std::string json = R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,1],"data":[1]}]})";
  std::string large = R"({"pad":")" + std::string(frontend::KServeService::kInlineParseBytes, 'x') +
                      R"(",)" + json.substr(1);
  std::string binary_header = R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,1],)"
                              R"("parameters":{"binary_data_size":4}}]})";
  std::string binary = binary_header + std::string(4, '\0');
  std::string length = std::to_string(binary_header.size());
  for (const Answered& a :
       {Infer(service, json, false, "broken"), Infer(service, large, false, "broken"),
        Infer(service, json, true, "broken"),
        Infer(service, binary, false, "broken", length.c_str()),
        Infer(service, std::string(4, '\0'), false, "broken", "0")}) {
    CHECK(a.response.status == 503);
    CHECK(a.response.body.find("model 'broken' failed to load") != std::string::npos);
  }
  // The host still serves.
  std::string row = "0";
  for (int i = 1; i < 784; ++i) {
    row += ",0";
  }
  CHECK(Infer(service,
              R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[)" + row +
                  "]}]}",
              false)
            .response.status == 200);
}

TEST_CASE(
    "ferry-hookhost starts sandboxed, reports ready, and stops or drains on its control ring") {
  FlowNode node(1);
  for (shm::ControlCode how : {shm::ControlCode::kStop, shm::ControlCode::kDrain}) {
    pid_t pid = testing::StartWorker(FERRY_HOOKHOST_BINARY, node.name, 1, node.config);
    REQUIRE(testing::WaitReady(node.segment, 1, pid, 60));
    shm::StatusSnapshotData status = shm::ReadStatus(node.segment, 1).value();
    CHECK(status.num_models == 3);
    CHECK(std::string(status.models[kBroken].name) == "broken");
    CHECK(status.models[kBroken].state == static_cast<uint32_t>(shm::ModelLoadState::kFailed));
    CHECK(status.models[kMlp].state == static_cast<uint32_t>(shm::ModelLoadState::kReady));
    uint64_t beat = shm::ReadHeartbeat(node.segment, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(shm::ReadHeartbeat(node.segment, 1) > beat);  // Alive: the heartbeat advances.
    REQUIRE(testing::SendControl(node.segment, 1, {how, 0, 0, 0}));
    int status_code = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waitpid(pid, &status_code, WNOHANG) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(WIFEXITED(status_code));
    CHECK(WEXITSTATUS(status_code) == 0);
    CHECK(shm::ReadStatus(node.segment, 1).value().state ==
          static_cast<uint32_t>(shm::ProcessState::kStopped));
    shm::ResetSlot(node.segment, 1);
  }
  // A worker slot is refused, with exit 1.
  pid_t wrong = testing::StartWorker(FERRY_HOOKHOST_BINARY, node.name, node.segment.WorkerSlot(0),
                                     node.config);
  int code = 0;
  waitpid(wrong, &code, 0);
  CHECK(WEXITSTATUS(code) == 1);
}

}  // namespace
}  // namespace ferry::hookhost

namespace ferry::hookhost {
namespace {

TEST_CASE(
    "a cancelled request is answered at once and leaves the worker's queue; priority and "
    "tenant reach the worker; the hook host counts every answer") {
  // Every batch takes a second and holds one request, so the third request stays queued
  // behind the other two however late this thread or the worker runs (a sleep only orders
  // the sends).
  FlowNode node(1,
                "[sim]\nfixed_us = 1000000\nper_row_us = 0\n"
                "[scheduler.models.mlp]\nmax_batch_size = 1\n",
                "backend = \"sim\"\n");
  Host host(node, GatewayMode::kLeastOutstanding);
  std::vector<uint8_t> input(784 * 4);
  auto send = [&](std::shared_ptr<CancelSignal> cancel, uint32_t priority, uint32_t tenant) {
    InferRequest r = Request(*host.host, "mlp", Shape{1, 784}, input, "input");
    r.cancel = std::move(cancel);
    r.priority = priority == 0 ? kDefaultPriority : static_cast<Priority>(priority);
    r.tenant = tenant;
    return host.host->Submit(std::move(r));
  };
  auto running = send(nullptr, 0, 0);  // Executes first.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto planned = send(nullptr, 1, 2);  // Decided next while the first executes.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto cancel = std::make_shared<CancelSignal>();
  auto queued = send(cancel, 0, 0);  // Waits in the worker's queue.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int64_t fired = MonotonicNs();
  cancel->Fire();
  Result<InferResponse> r = Get(queued);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kCancelled);
  // Not after the batches ahead of it (up to two seconds of execution).
  CHECK(MonotonicNs() - fired < 800'000'000);
  CHECK(Get(running).ok());
  CHECK(Get(planned).ok());
  // The worker took it out of its queue and counted it; it ran the other two only.
  shm::StatusSnapshotData s = shm::ReadStatus(node.segment, node.segment.WorkerSlot(0)).value();
  for (int i = 0; i < 2000 && (s.models[kMlp].outstanding != 0 || s.tenant_requests[2] == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = shm::ReadStatus(node.segment, node.segment.WorkerSlot(0)).value();
  }
  CHECK(s.models[kMlp].cancelled == 1);
  CHECK(s.models[kMlp].requests_served == 2);
  CHECK(s.tenant_requests[2] == 1);  // The tenant travelled with the request.
  // Every block came back, the cancelled request's input too (freed once the worker answered).
  for (int i = 0; i < 2000 && host.view.accounting(0).bytes_in_use.load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(host.view.accounting(0).bytes_in_use.load() == 0);
  // The hook host's counters: two answered OK (tenants 0 and 2), one CANCELLED.
  const shm::FrontEndCountersData& counters = node.segment.frontend_counters(0);
  auto answered = [&](uint32_t tenant, std::optional<ErrorCode> code) {
    size_t outcome = code ? static_cast<size_t>(*code) + 1 : 0;
    return counters.models[kMlp][tenant].answered[outcome].load();
  };
  CHECK(answered(0, std::nullopt) == 1);
  CHECK(answered(2, std::nullopt) == 1);
  CHECK(answered(0, ErrorCode::kCancelled) == 1);
  // A request for a model nobody serves is counted as unrouted.
  CHECK_FALSE(Get(host.host->Submit(Request(*host.host, "nope", Shape{1}, input, "x"))).ok());
  CHECK(counters.unrouted[static_cast<size_t>(ErrorCode::kNotFound) + 1].load() == 1);
  // An out-of-range tenant is refused, not clamped (a client's priority is checked where it is
  // decoded: PriorityFromParameter, kserve_codec_test).
  Result<InferResponse> refused = Get(send(nullptr, 0, shm::kMaxTenants + 1));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kInvalidArgument);
  CHECK(refused.error().message.find("out of range") != std::string::npos);
  // A signal fired after the answer does nothing.
  auto late = std::make_shared<CancelSignal>();
  CHECK(Get(send(late, 0, 0)).ok());
  late->Fire();
  CHECK(answered(0, ErrorCode::kCancelled) == 1);
}

// The front end as the hook host process runs it, on a listening socket: it serves, then after
// Drain refuses new work on open connections with 503 while answering what it read, reports
// Drained, and Stop closes what is left (and may be repeated, as the destructor does).
TEST_CASE("the front end serves, drains with 503 for new infers, reports drained, then stops") {
  FlowNode node(1);
  Host host(node, GatewayMode::kLeastOutstanding);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 16) == 0);
  socklen_t length = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  std::string address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  frontend::FrontEnd front;
  CHECK(front.Drained());  // Not started: nothing in flight.
  front.Drain();           // A no-op before Start.
  REQUIRE(front.Start(host.view, host.models, host.host.get(), fd, -1, FrontendSettings{}).ok());
  CHECK_FALSE(front.Drained());
  std::string row;
  for (int i = 0; i < 784; ++i) {
    row += (i == 0 ? "" : ",") + std::to_string(i % 5);
  }
  std::string infer =
      R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[)" + row + "]}]}";
  Result<net::HttpClient> client = net::HttpClient::Connect(address);
  REQUIRE(client.ok());
  Result<net::HttpAnswer> served = client->Request("POST", "/v2/models/mlp/infer", infer);
  REQUIRE(served.ok());
  CHECK(served->status == 200);

  front.Drain();
  Result<net::HttpAnswer> refused = client->Request("POST", "/v2/models/mlp/infer", infer);
  REQUIRE(refused.ok());
  CHECK(refused->status == 503);
  CHECK(refused->body.find("draining") != std::string::npos);
  bool drained = false;
  for (int i = 0; i < 5000 && !drained; ++i) {
    drained = front.Drained();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(drained);
  front.Stop(std::chrono::milliseconds(100));
  front.Stop(std::chrono::milliseconds(100));
  CHECK(front.Drained());
  close(fd);
  CheckArenasEmpty(node, host);
}

}  // namespace
}  // namespace ferry::hookhost
