// The OTLP exporter: a request becomes a gateway span and four children laid end to end,
// with the client's trace and parent ids; a collector on a real socket receives them; one that
// is down costs a batch (counted), never a wait in the caller; the queue is bounded; endpoints
// that are not http://HOST:PORT[/PATH] are refused.
#include "supervisor/trace_exporter.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <utility>

#include "common/clock.h"
#include "net/http_server.h"

namespace ferry::supervisor {
namespace {

using nlohmann::json;

ExportSpan Request(uint64_t parent) {
  ExportSpan s;
  s.model = "mlp";
  s.data = {};
  s.data.trace_hi = 0x0af7651916cd43ddull;
  s.data.trace_lo = 0x8448eb211c80319cull;
  s.data.parent_span = parent;
  s.data.span = 0x1234;
  s.data.start_unix_ns = 1'000'000;
  s.data.validate_ns = 10;
  s.data.preprocess_ns = 20;
  s.data.queue_ns = 300;
  s.data.compute_ns = 500;
  s.data.postprocess_ns = 70;
  s.data.total_ns = 1000;
  return s;
}

TEST_CASE("a request is a gateway span and four children laid end to end") {
  json body = json::parse(OtlpJson({Request(0xb7ad6b7169203331ull)}, "node-a"));
  json spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"];
  REQUIRE(spans.size() == 5);
  CHECK(spans[0]["name"] == "gateway");
  CHECK(spans[0]["traceId"] == "0af7651916cd43dd8448eb211c80319c");
  CHECK(spans[0]["parentSpanId"] == "b7ad6b7169203331");
  CHECK(spans[0]["spanId"] == "0000000000001234");
  CHECK(spans[0]["startTimeUnixNano"] == "1000000");
  CHECK(spans[0]["endTimeUnixNano"] == "1001000");
  const char* names[] = {"pre", "queue", "compute", "post"};
  const char* starts[] = {"1000000", "1000030", "1000330", "1000830"};
  const char* ends[] = {"1000030", "1000330", "1000830", "1000900"};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(spans[i + 1]["name"] == names[i]);
    CHECK(spans[i + 1]["parentSpanId"] == "0000000000001234");
    CHECK(spans[i + 1]["traceId"] == spans[0]["traceId"]);
    CHECK(spans[i + 1]["startTimeUnixNano"] == starts[i]);
    CHECK(spans[i + 1]["endTimeUnixNano"] == ends[i]);
    CHECK(spans[i + 1]["spanId"] != spans[0]["spanId"]);
  }
  CHECK(body["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"] == "ferry");
  // Without a traceparent the gateway span is a root.
  json root = json::parse(OtlpJson({Request(0)}, "n"))["resourceSpans"][0]["scopeSpans"][0];
  CHECK(!root["spans"][0].contains("parentSpanId"));
}

TEST_CASE("durations that lie are clamped inside the gateway span") {
  ExportSpan s = Request(0);
  s.data.queue_ns = -5;
  s.data.compute_ns = INT64_MAX;
  s.data.total_ns = 2000;
  json spans = json::parse(OtlpJson({s}, "n"))["resourceSpans"][0]["scopeSpans"][0]["spans"];
  for (const json& span : spans) {
    CHECK(std::stoll(span["endTimeUnixNano"].get<std::string>()) <= 1'002'000);
    CHECK(std::stoll(span["startTimeUnixNano"].get<std::string>()) >= 1'000'000);
  }
}

TEST_CASE("endpoints: http://HOST:PORT[/PATH] only") {
  auto ok = ParseOtlpEndpoint("http://127.0.0.1:4318");
  REQUIRE(ok.ok());
  CHECK(ok->first == "127.0.0.1:4318");
  CHECK(ok->second == "/v1/traces");
  CHECK(ParseOtlpEndpoint("http://collector:4318/otlp/v1/traces")->second == "/otlp/v1/traces");
  for (const char* bad : {"https://c:4318", "c:4318", "http://", "http://c",
                          "http://c:", "http://c:4318/a b", "http://c :1/"}) {
    CAPTURE(bad);
    CHECK(!ParseOtlpEndpoint(bad).ok());
  }
}

// A TCP socket bound to a free loopback port ("127.0.0.1:PORT"), listening when `backlog`
// is positive, else only bound (connections to it are refused).
std::pair<int, std::string> Loopback(int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  if (backlog > 0) {
    REQUIRE(listen(fd, backlog) == 0);
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return {fd, "127.0.0.1:" + std::to_string(ntohs(a.sin_port))};
}

struct Collector {
  int fd;
  std::string address;
  std::mutex mu;
  std::vector<std::string> bodies;
  std::unique_ptr<net::HttpServer> server;
  std::thread thread;
  Collector() {
    std::tie(fd, address) = Loopback(16);
    server = std::make_unique<net::HttpServer>(
        fd, net::HttpServerOptions{}, [this](net::HttpRequest&& r, net::Responder respond) {
          {
            std::lock_guard<std::mutex> lock(mu);
            bodies.push_back(r.target + " " + r.body);
          }
          net::HttpResponse answer;
          answer.body = "{}";
          respond(std::move(answer));
        });
    thread = std::thread([this] { server->Run(); });
  }
  ~Collector() {
    server->Stop();
    thread.join();
    close(fd);
  }
};

TEST_CASE("a collector on a real socket receives the spans") {
  Collector collector;
  {
    TraceExporter exporter(collector.address, "/v1/traces", "node-a");
    exporter.Push({Request(0), Request(7)});
    for (int i = 0; i < 500 && exporter.exported() < 2; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(exporter.exported() == 2);
    CHECK(exporter.failed() == 0);
  }
  std::lock_guard<std::mutex> lock(collector.mu);
  REQUIRE(collector.bodies.size() == 1);  // One batch.
  CHECK(collector.bodies[0].rfind("/v1/traces {", 0) == 0);
  json body = json::parse(collector.bodies[0].substr(collector.bodies[0].find(' ') + 1));
  CHECK(body["resourceSpans"][0]["scopeSpans"][0]["spans"].size() == 10);
}

TEST_CASE("a collector that is down costs its batch, counted; the queue is bounded") {
  auto [fd, address] = Loopback(0);  // Bound, never listening: connections refused.
  TraceExporter exporter(address, "/v1/traces", "n");
  int64_t before = MonotonicNs();
  std::vector<ExportSpan> many(TraceExporter::kMaxQueuedSpans + 10, Request(0));
  exporter.Push(std::move(many));
  CHECK(MonotonicNs() - before < 1'000'000'000);  // Push never waits on the collector.
  CHECK(exporter.dropped() >= 10);
  for (int i = 0; i < 1000 && exporter.failed() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(exporter.failed() > 0);
  CHECK(exporter.exported() == 0);
  close(fd);
}

TEST_CASE("a collector that takes connections and never answers cannot hold the stop") {
  auto [fd, address] = Loopback(64);  // Listening, never accepting.
  int64_t started = 0;
  {
    TraceExporter exporter(address, "/v1/traces", "n");
    exporter.Push(std::vector<ExportSpan>(TraceExporter::kBatchSpans * 8, Request(0)));
    started = MonotonicNs();
  }  // Eight batches queued: one timeout, then the rest dropped.
  CHECK(MonotonicNs() - started < 12'000'000'000);
  close(fd);
}

}  // namespace
}  // namespace ferry::supervisor
