// What the node tests share: a node file for CPU workers, CpuBackend run directly as the
// reference, random requests of the example models, and sending one over HTTP.
//
// Thread safety: Direct is not thread-safe; the functions are.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include "client/kserve_client.h"
#include "ctl/npy.h"
#include "model/repository.h"
#include "net/http_client.h"
#include "shm/segment.h"
#include "tests/testing/ferryd_process.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"

namespace ferry::testing {

using client::Tensor;
using net::HttpClient;
using nlohmann::json;

inline constexpr const char* kCpuNode = "devices = \"cpu:2\"\nhookhosts = 2\n";
inline constexpr const char* kSettings =
    "restart_backoff_ms = 20\nrestart_backoff_max_ms = 200\ndrain_timeout_seconds = 20\n"
    "[cpu]\nthreads = 1\npin = false\n";

// CpuBackend run directly, one request at a time at the smallest compiled size holding it.
struct Direct {
  std::vector<RepositoryModel> repo;
  CpuBackend backend{CpuOptions{CpuMode::kFast, 1}};
  std::map<std::string, std::pair<const Manifest*, ModelHandle>> models;
  std::mutex mu;
  explicit Direct(const std::string& dir) : repo(LoadRepository(dir).value()) {
    for (const RepositoryModel& m : repo) {
      if (m.bundle) {
        models[m.name] = {&m.bundle->manifest, backend.Load(*m.bundle).value()};
      }
    }
  }
  std::vector<uint8_t> Run(const std::string& model, int64_t rows, const std::vector<uint8_t>& in) {
    std::lock_guard<std::mutex> lock(mu);
    auto& [manifest, handle] = models.at(model);
    int64_t size =
        *std::lower_bound(manifest->batch_sizes.begin(), manifest->batch_sizes.end(), rows);
    std::vector<uint8_t> out(static_cast<size_t>(rows) * 10 * 4);
    BatchJob job{0, size, {{rows, {in}, {out}}}};
    REQUIRE(backend.Execute(handle, job).ok());
    return out;
  }
};

inline bool SameFloats(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return false;
  }
  for (size_t i = 0; i + 4 <= want.size(); i += 4) {
    float a, b;
    std::memcpy(&a, got.data() + i, 4);
    std::memcpy(&b, want.data() + i, 4);
    if (std::fabs(a - b) > 1e-4f * std::max(1.0f, std::fabs(b))) {
      return false;
    }
  }
  return true;
}

struct Sample {
  std::string model;
  int64_t rows;
  std::vector<uint8_t> input;
  Shape shape;
  std::string input_name;
};

inline Sample MakeSample(std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1, 1);
  Sample s;
  bool mlp = rng() % 2 == 0;
  s.model = mlp ? "mlp" : "cnn";
  s.rows = mlp ? 1 + rng() % 4 : 1 + rng() % 2;
  s.input_name = mlp ? "input" : "image";
  s.shape = mlp ? Shape{s.rows, 784} : Shape{s.rows, 3, 32, 32};
  size_t count = static_cast<size_t>(s.rows) * (mlp ? 784 : 3 * 32 * 32);
  s.input.resize(count * 4);
  for (size_t i = 0; i < count; ++i) {
    float f = value(rng);
    std::memcpy(s.input.data() + 4 * i, &f, 4);
  }
  return s;
}

inline Result<client::InferAnswer> Send(HttpClient& client, const Sample& s) {
  client::InferBody body =
      client::BuildInferBody({Tensor{s.input_name, DType::kF32, s.shape, s.input}});
  Result<net::HttpAnswer> answer =
      client.Request("POST", "/v2/models/" + s.model + "/infer", body.body, body.headers);
  if (!answer.ok()) {
    return answer.error();
  }
  return client::ReadInferAnswer(*answer);
}

// The node's /metrics text.
inline std::string ScrapeMetrics(const FerrydProcess& ferryd) {
  Result<json> status = ferryd.Status();
  REQUIRE(status.ok());
  Result<HttpClient> client =
      HttpClient::Connect((*status)["listen"]["metrics"].get<std::string>());
  REQUIRE(client.ok());
  Result<net::HttpAnswer> metrics = client->Request("GET", "/metrics");
  REQUIRE(metrics.ok());
  return metrics->body;
}

inline std::string HttpAddress(const FerrydProcess& ferryd) {
  Result<json> s = ferryd.Status();
  REQUIRE(s.ok());
  return (*s)["listen"]["http"].get<std::string>();
}

}  // namespace ferry::testing
