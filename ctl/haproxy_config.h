// `ferryctl haproxy-config`: an HAProxy configuration for several ferry nodes (docs/operations.md
// "Several nodes behind HAProxy"). ferry does not route between hosts itself: HAProxy does,
// told by each node which models it can serve (per-model readiness checks) and how loaded it
// is (the agent check, shm/node_load.h).
//
//   frontend ferry_http (HTTP/1.1): /v2/models/M/... goes to backend ferry_http_M, whose
//     servers are the nodes, each checked on GET /v2/models/M/ready; anything else (health,
//     metadata, the repository index) to ferry_http_any, checked on /v2/health/ready.
//   frontend ferry_grpc (HTTP/2): backend ferry_grpc, the nodes' gRPC ports, checked over
//     HTTP on /v2/health/ready (gRPC carries the model inside the message, out of HAProxy's
//     sight: every node is eligible).
//   every server: agent-check on the node's agent port (its weight and drain), balance
//     leastconn, `retry-on conn-failure` with `option redispatch` (a request that reached a
//     node is never sent twice), timeouts, and a runtime socket for `set server` by hand.
//
// Every value written into the file is checked first: hosts, ports and model names, so that
// nothing given on the command line or reported by a node can add a line of its own.
//
// Thread safety: pure functions, and RunHaproxyConfig's HTTP calls.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/result.h"

namespace ferry::ctl {

struct HaproxyNode {
  std::string host;  // An IPv4 address, a DNS name or a bracketed IPv6 address.
  uint16_t http = 0, grpc = 0, agent = 0;
};

struct HaproxyCommand {
  std::vector<std::string> nodes;  // HOST:HTTP_PORT:GRPC_PORT:AGENT_PORT each.
  std::string bind_http = "0.0.0.0:8000";
  std::string bind_grpc = "0.0.0.0:8001";
  std::vector<std::string> models;  // Empty: those the nodes report ready.
  std::string runtime_socket = "/run/haproxy/ferry.sock";
  // HAProxy's global maxconn: it needs about twice as many descriptors (RLIMIT_NOFILE).
  int64_t maxconn = 4096;
};

// "HOST:HTTP:GRPC:AGENT" ("[::1]:8000:8001:8003" for IPv6). INVALID_ARGUMENT naming the part.
Result<HaproxyNode> ParseHaproxyNode(const std::string& text);

// The configuration. REQUIRES: `nodes` parsed by ParseHaproxyNode, `models` valid model names,
// `command`'s binds, socket and maxconn valid (RunHaproxyConfig checks them).
std::string RenderHaproxyConfig(const std::vector<HaproxyNode>& nodes,
                                const std::vector<std::string>& models,
                                const HaproxyCommand& command);

// Checks the command, asks the nodes for their models when none are given (POST
// /v2/repository/index {"ready": true} on each, their union), and writes the configuration to
// `out`. Exit code: 0, or 2 with the reason on `err`.
int RunHaproxyConfig(const HaproxyCommand& command, std::ostream& out, std::ostream& err);

}  // namespace ferry::ctl
