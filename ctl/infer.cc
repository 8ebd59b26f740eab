#include "ctl/infer.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <ostream>

#include "client/kserve_client.h"
#include "control/control_client.h"
#include "ctl/npy.h"
#include "net/http_client.h"

namespace ferry::ctl {
namespace {

using nlohmann::json;

std::string Preview(const client::Tensor& t) {
  std::string out;
  size_t elem = static_cast<size_t>(DTypeBits(t.dtype) / 8);
  size_t n = elem == 0 ? 0 : t.bytes.size() / elem;
  for (size_t i = 0; i < n && i < 10; ++i) {
    const uint8_t* p = t.bytes.data() + i * elem;
    double v = 0;
    switch (t.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        v = f;
        break;
      }
      case DType::kF64:
        std::memcpy(&v, p, 8);
        break;
      case DType::kI64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        v = static_cast<double>(x);
        break;
      }
      case DType::kI32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v = x;
        break;
      }
      default:
        v = *p;
        break;
    }
    out += fmt::format("{}{:.5g}", i == 0 ? "" : ", ", v);
  }
  return "[" + out + (n > 10 ? ", ...]" : "]");
}

}  // namespace

int RunInfer(const InferOptions& options, std::ostream& out, std::ostream& err) {
  std::string url = options.url;
  if (url.empty()) {
    control::ControlRequest status;
    status.command = control::Command::kStatus;
    Result<json> reply = control::CallFerryd(options.socket, status);
    if (!reply.ok()) {
      err << "ferryctl: " << reply.error().ToString() << " (or pass --url HOST:PORT)\n";
      return 1;
    }
    if (!reply->contains("listen") || !(*reply)["listen"].contains("http")) {
      err << "ferryctl: ferryd's status names no HTTP address; pass --url\n";
      return 1;
    }
    url = (*reply)["listen"]["http"].get<std::string>();
    if (url.rfind("0.0.0.0:", 0) == 0) {
      url = "127.0.0.1:" + url.substr(8);
    }
  }
  Result<net::HttpClient> client = net::HttpClient::Connect(url);
  if (!client.ok()) {
    err << "ferryctl: " << client.error().ToString() << "\n";
    return 1;
  }
  Result<net::HttpAnswer> meta = client->Request("GET", "/v2/models/" + options.model);
  if (!meta.ok() || meta->status != 200) {
    err << "ferryctl: model '" << options.model
        << "': " << (meta.ok() ? meta->body : meta.error().ToString()) << "\n";
    return 1;
  }
  json metadata = json::parse(meta->body, nullptr, false);
  std::string first_input;
  if (metadata.is_object() && metadata.contains("inputs") && metadata["inputs"].is_array() &&
      !metadata["inputs"].empty() && metadata["inputs"][0].contains("name")) {
    first_input = metadata["inputs"][0]["name"].get<std::string>();
  }
  std::vector<client::Tensor> inputs;
  for (const std::string& spec : options.inputs) {
    size_t eq = spec.find('=');
    std::string name = eq == std::string::npos ? first_input : spec.substr(0, eq);
    std::string path = eq == std::string::npos ? spec : spec.substr(eq + 1);
    Result<client::Tensor> t = ReadNpy(path, name);
    if (!t.ok()) {
      err << "ferryctl: " << t.error().ToString() << "\n";
      return 2;
    }
    inputs.push_back(std::move(*t));
  }
  json parameters = json::object();
  if (options.deadline_ms > 0) {
    parameters["timeout"] = options.deadline_ms * 1000;  // Microseconds.
  }
  client::InferBody body = client::BuildInferBody(inputs, parameters);
  Result<net::HttpAnswer> answer =
      client->Request("POST", "/v2/models/" + options.model + "/infer", body.body, body.headers);
  if (!answer.ok()) {
    err << "ferryctl: " << answer.error().ToString() << "\n";
    return 1;
  }
  Result<client::InferAnswer> result = client::ReadInferAnswer(*answer);
  if (!result.ok()) {
    err << "ferryctl: " << result.error().ToString() << "\n";
    return 1;
  }
  json report = {
      {"model", options.model}, {"parameters", result->parameters}, {"outputs", json::array()}};
  for (const client::Tensor& t : result->outputs) {
    json o = {{"name", t.name}, {"datatype", std::string(KServeName(t.dtype))}, {"shape", t.shape}};
    if (!options.output_dir.empty()) {
      std::string path = options.output_dir + "/" + t.name + ".npy";
      std::ofstream file(path, std::ios::binary | std::ios::trunc);
      std::string bytes = EncodeNpy(t);
      file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!file) {
        err << "ferryctl: cannot write " << path << "\n";
        return 2;
      }
      o["file"] = path;
    }
    if (!options.json) {
      out << fmt::format("{} {} {}: {}\n", t.name, KServeName(t.dtype), json(t.shape).dump(),
                         Preview(t));
    }
    report["outputs"].push_back(o);
  }
  if (options.json) {
    out << report.dump(2) << "\n";
  } else {
    out << "server: " << result->parameters.dump() << "\n";
  }
  return 0;
}

}  // namespace ferry::ctl
