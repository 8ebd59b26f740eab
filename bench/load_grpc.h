// ferry-load over gRPC ModelInfer (bench/load_main.cc): channels of their own (so TCP
// connections), both loops run on completion queues.
//
// Why not a thread per call: gRPC's poller (epoll1) lets one thread of the process wait in
// epoll while every other waits on a futex to be handed its event. With a blocking call per
// thread, 52% of this client's time went to the kernel (17% switching threads) and it used
// about half the CPU per request that the server it measured did (docs/benchmarks.md). A load
// generator that costs less leaves the cores to the servers, both measured with this client.
//
// Thread safety: each function runs on its caller's thread (RunGrpcClosedLoop starts its own).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/load.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"

namespace ferry::bench {

// A stub on a channel of its own (its own TCP connection) to `url` (host:port).
std::unique_ptr<inference::GRPCInferenceService::Stub> GrpcStub(const std::string& url);

// The sample of an answer due at `due` and received at `done`, with the server's figures
// (ferry's response parameters) where it reports them.
Sample GrpcSample(const inference::ModelInferResponse& response, Clock::time_point due,
                  Clock::time_point done);

// Closed loop: `in_flight` calls always outstanding, each on its own channel (call i sends
// payloads[(i + k) % size] for its k-th request), run by `threads` threads each with its own
// completion queue and its share of the channels; samples of calls started after `warmup`
// seconds, for `seconds` more. REQUIRES: payloads not empty; in_flight >= 1; threads >= 1.
Level RunGrpcClosedLoop(const std::string& url, const std::vector<Payload>& payloads, int in_flight,
                        int threads, double seconds, double warmup);

// Open loop: requests due at `rate` per second, each started at its due time (late when the
// client is) on the next of `connections` channels in turn (a channel carries several calls
// when answers lag), by a thread that only sends, while the calling thread takes the answers
// from the one completion queue; latency counts from when the request was due. Samples of
// requests due after `warmup` seconds, for `seconds` more.
// REQUIRES: payloads not empty; rate > 0; connections >= 1.
Level RunGrpcOpenLoop(const std::string& url, const std::vector<Payload>& payloads, double rate,
                      int connections, double seconds, double warmup);

}  // namespace ferry::bench
