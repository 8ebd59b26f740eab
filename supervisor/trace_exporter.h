// ferryd's OTLP exporter (docs/frontend.md, "Tracing"): spans the hook hosts wrote into their
// trace stores (shm/trace_store.h) are batched and sent as OTLP/HTTP JSON
// (ExportTraceServiceRequest) to [trace] otlp_endpoint, on a thread of its own: ferryd's loop
// only hands spans over, never waits for the collector.
//
// Each sampled request becomes five spans of one trace: "gateway" (SERVER kind: the request
// at the hook host, Submit to answer; its parent the client's traceparent span when one came)
// and its children "pre" (checks and the preprocess plugin), "queue" (at the worker, before its
// batch), "compute" (the batch's execution) and "post" (joining and the postprocess plugin),
// laid end to end from the answer's timings (the moves between processes, microseconds, fall
// inside the gateway span but in no child).
//
// Bounded: at most kMaxQueuedSpans wait; more are dropped and counted. A collector that does
// not answer within the timeout costs that batch (counted), not ferryd's loop.
//
// Thread safety: Push from ferryd's loop; the counters from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "net/http_client.h"
#include "shm/trace_store.h"

namespace ferry::supervisor {

struct ExportSpan {
  shm::TraceSpanData data;
  std::string model;
};

// The OTLP/HTTP JSON body of `spans` (service.name "ferry", host.name `node`).
std::string OtlpJson(const std::vector<ExportSpan>& spans, const std::string& node);

// "http://HOST:PORT/PATH" -> {"HOST:PORT", "/PATH"} (PATH "/v1/traces" when absent).
// INVALID_ARGUMENT for anything else (https is not spoken here: a local collector forwards).
Result<std::pair<std::string, std::string>> ParseOtlpEndpoint(const std::string& url);

class TraceExporter {
 public:
  static constexpr size_t kMaxQueuedSpans = 8192;
  static constexpr size_t kBatchSpans = 512;

  // REQUIRES: `endpoint` parsed by ParseOtlpEndpoint.
  TraceExporter(std::string address, std::string path, std::string node);
  // Sends what is queued for at most one timeout (5 s), and stops at the first failure;
  // what is left is dropped (counted).
  ~TraceExporter();
  TraceExporter(const TraceExporter&) = delete;
  TraceExporter& operator=(const TraceExporter&) = delete;

  void Push(std::vector<ExportSpan> spans);

  uint64_t exported() const { return exported_.load(); }
  uint64_t failed() const { return failed_.load(); }    // Spans of batches not accepted.
  uint64_t dropped() const { return dropped_.load(); }  // Spans past kMaxQueuedSpans.

 private:
  void Run();
  // One batch to the collector, connecting first when `client` is not connected.
  Status Send(const std::vector<ExportSpan>& batch, std::optional<net::HttpClient>* client);
  std::string address_;
  std::string path_;
  std::string node_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<ExportSpan> queue_;  // Guarded by mu_.
  bool stop_ = false;             // Guarded by mu_.
  std::atomic<uint64_t> exported_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> dropped_{0};
  std::thread thread_;
};

}  // namespace ferry::supervisor
