#include "ctl/haproxy_config.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "config/node_config.h"
#include "config/scheduler_config.h"
#include "net/http_client.h"

namespace ferry::ctl {
namespace {

Result<uint16_t> ParsePort(std::string_view text, std::string_view what) {
  unsigned port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || port == 0 ||
      port > 65535) {
    return InvalidArgument(std::string(what) + " '" + std::string(text.substr(0, 16)) +
                           "' is not a port in [1, 65535]");
  }
  return static_cast<uint16_t>(port);
}

// The host as HAProxy and a URL write it: an IPv6 literal in brackets.
std::string HostPart(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

void Defaults(std::ostream& o, const HaproxyCommand& command) {
  o << "global\n"
    << "  stats socket " << command.runtime_socket << " mode 600 level admin\n"
    << "  maxconn " << command.maxconn << "\n\n"
    << "defaults\n"
    << "  mode http\n"
    << "  timeout connect 2s\n"
    << "  timeout client 60s\n"
    << "  timeout server 60s\n"
    << "  timeout http-request 10s\n"
    << "  timeout check 2s\n"
    << "  # Only a connection that failed is tried again, on another node: a request that\n"
    << "  # reached a node is never sent twice.\n"
    << "  retries 2\n"
    << "  retry-on conn-failure\n"
    << "  option redispatch 1\n\n";
}

// One server line per node: checked on `check_path` over HTTP, weighted by its agent.
void Servers(std::ostream& o, const std::vector<HaproxyNode>& nodes, bool grpc) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const HaproxyNode& n = nodes[i];
    o << "  server node" << i << " " << HostPart(n.host) << ":" << (grpc ? n.grpc : n.http)
      << (grpc ? " proto h2 check-proto h1" : "") << " check port " << n.http
      << " inter 1s fall 2 rise 2"
      << " agent-check agent-port " << n.agent << " agent-inter 1s weight 100\n";
  }
}

}  // namespace

Result<HaproxyNode> ParseHaproxyNode(const std::string& text) {
  const std::string form = "--node '" + text.substr(0, 128) + "': expected HOST:HTTP:GRPC:AGENT";
  std::vector<std::string_view> ports;
  std::string_view rest = text;
  for (int i = 0; i < 3; ++i) {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument(form);
    }
    ports.insert(ports.begin(), rest.substr(colon + 1));
    rest = rest.substr(0, colon);
  }
  Result<ListenAddress> host = ParseListenAddress(std::string(rest) + ":1");
  if (!host.ok() || host->host.empty()) {
    return InvalidArgument(form + " (the host: an IPv4 address, a DNS name or [IPv6])");
  }
  HaproxyNode node;
  node.host = host->host;
  FERRY_ASSIGN_OR_RETURN(node.http, ParsePort(ports[0], form + ": HTTP port"));
  FERRY_ASSIGN_OR_RETURN(node.grpc, ParsePort(ports[1], form + ": gRPC port"));
  FERRY_ASSIGN_OR_RETURN(node.agent, ParsePort(ports[2], form + ": agent port"));
  return node;
}

std::string RenderHaproxyConfig(const std::vector<HaproxyNode>& nodes,
                                const std::vector<std::string>& models,
                                const HaproxyCommand& command) {
  std::ostringstream o;
  o << "# Written by ferryctl haproxy-config for " << nodes.size() << " node(s) and "
    << models.size() << " model(s); regenerate it when models move (docs/operations.md).\n";
  Defaults(o, command);
  o << "frontend ferry_http\n  bind " << command.bind_http << "\n";
  for (const std::string& m : models) {
    o << "  use_backend ferry_http_" << m << " if { path /v2/models/" << m
      << " } || { path_beg /v2/models/" << m << "/ }\n";
  }
  o << "  default_backend ferry_http_any\n\n";
  for (const std::string& m : models) {
    o << "backend ferry_http_" << m << "\n  balance leastconn\n"
      << "  option httpchk GET /v2/models/" << m << "/ready\n  http-check expect status 200\n";
    Servers(o, nodes, false);
    o << "\n";
  }
  o << "backend ferry_http_any\n  balance leastconn\n"
    << "  option httpchk GET /v2/health/ready\n  http-check expect status 200\n";
  Servers(o, nodes, false);
  o << "\nfrontend ferry_grpc\n  bind " << command.bind_grpc << " proto h2\n"
    << "  default_backend ferry_grpc\n\n"
    << "backend ferry_grpc\n  balance leastconn\n"
    << "  option httpchk GET /v2/health/ready\n  http-check expect status 200\n";
  Servers(o, nodes, true);
  return o.str();
}

namespace {

// The models node `n` reports ready (its repository index).
Result<std::vector<std::string>> ReadyModels(const HaproxyNode& n) {
  std::string address = HostPart(n.host) + ":" + std::to_string(n.http);
  FERRY_ASSIGN_OR_RETURN(net::HttpClient client, net::HttpClient::Connect(address, 5000));
  FERRY_ASSIGN_OR_RETURN(net::HttpAnswer a,
                         client.Request("POST", "/v2/repository/index", R"({"ready":true})"));
  nlohmann::json index = nlohmann::json::parse(a.body, nullptr, false);
  if (a.status != 200 || !index.is_array()) {
    return Unavailable("node " + address + ": its repository index was not a list (HTTP " +
                       std::to_string(a.status) + ")");
  }
  std::vector<std::string> names;
  for (const nlohmann::json& entry : index) {
    if (entry.is_object() && entry.contains("name") && entry["name"].is_string()) {
      names.push_back(entry["name"].get<std::string>());
    }
  }
  return names;
}

}  // namespace

int RunHaproxyConfig(const HaproxyCommand& command, std::ostream& out, std::ostream& err) {
  if (command.nodes.empty()) {
    err << "ferryctl: name at least one --node HOST:HTTP:GRPC:AGENT\n";
    return 2;
  }
  std::vector<HaproxyNode> nodes;
  for (const std::string& text : command.nodes) {
    Result<HaproxyNode> node = ParseHaproxyNode(text);
    if (!node.ok()) {
      err << "ferryctl: " << node.error().message << "\n";
      return 2;
    }
    nodes.push_back(*node);
  }
  for (const std::string& bind : {command.bind_http, command.bind_grpc}) {
    Result<ListenAddress> parsed = ParseListenAddress(bind);
    if (!parsed.ok() || parsed->port == 0) {  // HAProxy binds no port 0.
      err << "ferryctl: bind address '" << bind.substr(0, 128)
          << "': expected HOST:PORT, PORT in [1, 65535]\n";
      return 2;
    }
  }
  if (command.maxconn < 1 || command.maxconn > 10'000'000) {
    err << "ferryctl: --maxconn must be in [1, 10000000]\n";
    return 2;
  }
  if (command.runtime_socket.empty() || command.runtime_socket.front() != '/' ||
      command.runtime_socket.find_first_of(" \t\r\n#") != std::string::npos) {
    err << "ferryctl: --runtime-socket must be an absolute path without spaces\n";
    return 2;
  }
  std::set<std::string> models(command.models.begin(), command.models.end());
  if (command.models.empty()) {
    for (const HaproxyNode& n : nodes) {
      Result<std::vector<std::string>> ready = ReadyModels(n);
      if (!ready.ok()) {
        err << "ferryctl: " << ready.error().message << " (or name the models with --models)\n";
        return 2;
      }
      models.insert(ready->begin(), ready->end());
    }
  }
  for (const std::string& m : models) {
    if (!IsValidModelName(m)) {  // A node's answer is checked like the command line.
      err << "ferryctl: '" << m.substr(0, 128) << "' is not a model name\n";
      return 2;
    }
  }
  out << RenderHaproxyConfig(nodes, {models.begin(), models.end()}, command);
  return 0;
}

}  // namespace ferry::ctl
