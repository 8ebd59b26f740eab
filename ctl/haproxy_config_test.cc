// ferryctl haproxy-config: node addresses parsed and checked (nothing on the command line can
// add a line to the file), and the configuration's parts for every model and node.
#include "ctl/haproxy_config.h"

#include <doctest/doctest.h>

#include <sstream>

namespace ferry::ctl {
namespace {

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST_CASE("nodes: HOST:HTTP:GRPC:AGENT, IPv6 in brackets; anything else refused, named") {
  Result<HaproxyNode> n = ParseHaproxyNode("10.0.0.7:8000:8001:8003");
  REQUIRE(n.ok());
  CHECK(n->host == "10.0.0.7");
  CHECK(n->http == 8000);
  CHECK(n->grpc == 8001);
  CHECK(n->agent == 8003);
  Result<HaproxyNode> v6 = ParseHaproxyNode("[::1]:1:2:65535");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(ParseHaproxyNode("gpu-7.example.com:8000:8001:8003").ok());
  for (const char* bad : {"10.0.0.7:8000:8001", "10.0.0.7:8000:8001:0", ":8000:8001:8003",
                          "10.0.0.7:8000:8001:65536", "10.0.0.7:8000:x:8003", "a b:8000:8001:8003",
                          "h\n  server evil 1.2.3.4:80:8000:8001:8003", "::1:8000:8001:8003"}) {
    CAPTURE(bad);
    Result<HaproxyNode> r = ParseHaproxyNode(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.error().message, "expected HOST:HTTP:GRPC:AGENT"));
  }
}

TEST_CASE("the configuration: a backend per model checked on its readiness, agents, retries") {
  std::vector<HaproxyNode> nodes = {ParseHaproxyNode("10.0.0.7:8000:8001:8003").value(),
                                    ParseHaproxyNode("[fd00::2]:9000:9001:9003").value()};
  HaproxyCommand command;
  command.bind_http = "0.0.0.0:80";
  command.bind_grpc = "0.0.0.0:81";
  std::string cfg = RenderHaproxyConfig(nodes, {"cnn", "mlp"}, command);
  CHECK(Contains(cfg,
                 "  use_backend ferry_http_mlp if { path /v2/models/mlp } || "
                 "{ path_beg /v2/models/mlp/ }\n"));
  CHECK(Contains(cfg,
                 "backend ferry_http_cnn\n  balance leastconn\n"
                 "  option httpchk GET /v2/models/cnn/ready\n"));
  CHECK(Contains(cfg,
                 "  server node0 10.0.0.7:8000 check port 8000 inter 1s fall 2 rise 2 "
                 "agent-check agent-port 8003 agent-inter 1s weight 100\n"));
  CHECK(Contains(cfg, "  server node1 [fd00::2]:9001 proto h2 check-proto h1 check port 9000"));
  CHECK(Contains(cfg, "  bind 0.0.0.0:81 proto h2\n"));
  CHECK(Contains(cfg, "  retry-on conn-failure\n  option redispatch 1\n"));
  CHECK(Contains(cfg, "  stats socket /run/haproxy/ferry.sock mode 600 level admin\n"));
  CHECK(Contains(cfg, "  maxconn 4096\n"));
  // Each node once per backend: two models, the catch-all and gRPC.
  size_t servers = 0;
  for (size_t at = cfg.find("  server "); at != std::string::npos;
       at = cfg.find("  server ", at + 1)) {
    ++servers;
  }
  CHECK(servers == 2 * 4);
}

TEST_CASE("the command refuses bad models, binds and sockets before writing anything") {
  HaproxyCommand command;
  command.nodes = {"127.0.0.1:8000:8001:8003"};
  command.models = {"mlp"};
  std::ostringstream out, err;
  CHECK(RunHaproxyConfig(command, out, err) == 0);
  CHECK(Contains(out.str(), "backend ferry_http_mlp"));
  for (auto mutate : std::vector<void (*)(HaproxyCommand&)>{
           [](HaproxyCommand& c) { c.models = {"mlp }\n  use_backend x"}; },
           [](HaproxyCommand& c) { c.bind_http = "0.0.0.0:80 ssl crt /x"; },
           [](HaproxyCommand& c) { c.bind_grpc = "127.0.0.1:0"; },
           [](HaproxyCommand& c) { c.runtime_socket = "/run/x.sock level admin"; },
           [](HaproxyCommand& c) { c.maxconn = 0; }, [](HaproxyCommand& c) { c.nodes.clear(); }}) {
    HaproxyCommand bad = command;
    mutate(bad);
    std::ostringstream o, e;
    CHECK(RunHaproxyConfig(bad, o, e) == 2);
    CHECK(o.str().empty());
    CHECK_FALSE(e.str().empty());
  }
}

}  // namespace
}  // namespace ferry::ctl
