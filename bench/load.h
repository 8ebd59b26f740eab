// What ferry-load's parts share: the requests it sends, the samples it takes and a level's
// results (bench/load_main.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/kserve_client.h"
#include "hookhost/frontend/proto/inference.pb.h"

namespace ferry::bench {

using Clock = std::chrono::steady_clock;

// `seconds` after `from`.
inline Clock::time_point After(Clock::time_point from, double seconds) {
  return from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// One model's request, in both protocols' forms.
struct Payload {
  std::string model;
  client::InferBody body;             // HTTP.
  inference::ModelInferRequest grpc;  // gRPC.
};

// One answered request.
struct Sample {
  double latency_us;
  double overhead_us;  // < 0 when the server does not report it.
  // The overhead's parts the server reports: its checks and routing (validate_us), the wait
  // in the worker's queue (queue_us); the rest is the hand-offs both ways and the join.
  double validate_us = -1;
  double queue_us = -1;
  int64_t batch = 0;
  size_t model = 0;  // Index into the payloads.
};

// One level's run: its samples (those due after the warm-up) and errors.
struct Level {
  std::string mode;
  double offered = 0;  // Concurrency, or requests/s for open loop.
  double seconds = 0;
  std::vector<Sample> samples = {};
  std::map<std::string, uint64_t> errors = {};  // "http 503", "grpc 14", "connection" -> count.
};

}  // namespace ferry::bench
