// ferry-json-bench [--rows N] [--count N] [--json]: the KServe v2 JSON codec alone, against
// its baselines in the same run, on one thread.
//   parse:  an infer body of N rows x 784 FP32 values written with full precision (%.9g, as
//           the issue's load generator sends), parsed into the tensor's bytes by
//           - ferry (hookhost/frontend/infer_request_json.cc: simdjson On-Demand, straight into the
//           bytes);
//           - nlohmann: a DOM of the document, then each element converted (what a
//             straightforward server does, and ferry did before);
//           - memcpy of the same tensor sent binary (the floor: no text at all).
//   encode: the answer of N rows x 10 FP32 logits, ferry's writer (std::to_chars) against
//           nlohmann's dump of a DOM built for it.
// Every parse's bytes are checked against the values written (a parser that skips work
// fails). Each figure is the median of 5 batches of `count` bodies.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "hookhost/frontend/kserve_codec.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string Body(const std::vector<float>& values, int rows) {
  std::string body = R"({"id":"bench","inputs":[{"name":"input","datatype":"FP32","shape":[)" +
                     std::to_string(rows) + R"(,784],"data":[)";
  char buffer[32];
  for (size_t i = 0; i < values.size(); ++i) {
    int n = std::snprintf(buffer, sizeof(buffer), "%s%.9g", i == 0 ? "" : ",", values[i]);
    body.append(buffer, static_cast<size_t>(n));
  }
  body += "]}]}";
  return body;
}

// The baseline parser: a DOM, then its elements converted (no checks beyond the types').
std::vector<uint8_t> NlohmannParse(const std::string& body) {
  json doc = json::parse(body);
  const json& tensor = doc["inputs"][0];
  const json& data = tensor["data"];
  std::vector<uint8_t> bytes(data.size() * 4);
  size_t i = 0;
  for (const json& v : data) {
    float f = static_cast<float>(v.get<double>());
    std::memcpy(bytes.data() + 4 * i++, &f, 4);
  }
  return bytes;
}

// Median seconds per call of `fn` over 5 batches of `count`.
template <typename Fn>
double Time(int count, Fn fn) {
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      fn();
    }
    batches.push_back(std::chrono::duration<double>(Clock::now() - start).count() / count);
  }
  std::sort(batches.begin(), batches.end());
  return batches[2];
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "ferry-json-bench: " << what << "\n";
    std::exit(1);
  }
}

struct Timings {
  double ferry_s, nlohmann_s, memcpy_s, encode_s, encode_nlohmann_s;
};

volatile size_t sink = 0;  // Every timed call's result goes here, so none is optimised away.

Timings TimeParse(const std::string& body, const std::string& binary, int count) {
  Timings t{};
  t.ferry_s = Time(count, [&] {
    ferry::Result<ferry::frontend::ParsedInfer> p = ferry::frontend::ParseInferRequest(body, {});
    sink = sink + p->request.inputs[0].bytes[0];
  });
  t.nlohmann_s = Time(count, [&] { sink = sink + NlohmannParse(body)[0]; });
  std::vector<uint8_t> copy(binary.size());
  t.memcpy_s = Time(count * 10, [&] {
    std::memcpy(copy.data(), binary.data(), binary.size());
    sink = sink + copy[static_cast<size_t>(sink) % copy.size()];
  });
  return t;
}

// The answer: rows x 10 logits, by ferry's writer and by a nlohmann DOM.
void TimeEncode(const std::vector<float>& values, int rows, int count, Timings* t) {
  ferry::hookhost::InferResponse response;
  std::vector<uint8_t> logits(static_cast<size_t>(rows) * 10 * 4);
  std::memcpy(logits.data(), values.data(), logits.size());
  response.outputs.push_back({"logits", ferry::DType::kF32, {rows, 10}, logits});
  ferry::frontend::ParsedInfer request;
  request.id = "bench";
  t->encode_s = Time(count, [&] {
    auto e = ferry::frontend::EncodeInferResponse("mlp", 1, request, response);
    sink = sink + e->body.size();
  });
  t->encode_nlohmann_s = Time(count, [&] {
    json out = {{"id", "bench"}, {"model_name", "mlp"}, {"model_version", "1"}};
    json data = json::array();
    for (size_t i = 0; i < logits.size(); i += 4) {
      float f;
      std::memcpy(&f, logits.data() + i, 4);
      data.push_back(f);
    }
    out["outputs"] = json::array({{{"name", "logits"},
                                   {"datatype", "FP32"},
                                   {"shape", {rows, 10}},
                                   {"data", std::move(data)}}});
    sink = sink + out.dump().size();
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-json-bench: the KServe JSON codec against nlohmann and memcpy"};
  int rows = 1;
  int count = 2000;
  bool as_json = false;
  app.add_option("--rows", rows, "rows of 784 FP32 values per body")->check(CLI::Range(1, 64));
  app.add_option("--count", count, "bodies per timed batch")->check(CLI::Range(1, 1000000));
  app.add_flag("--json", as_json, "one JSON object on stdout");
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows) * 784);
  for (float& v : values) {
    v = normal(rng);
  }
  const std::string body = Body(values, rows);
  const std::string binary(reinterpret_cast<const char*>(values.data()), values.size() * 4);

  ferry::Result<ferry::frontend::ParsedInfer> parsed = ferry::frontend::ParseInferRequest(body, {});
  Check(parsed.ok() && parsed->request.inputs.size() == 1 &&
            std::memcmp(parsed->request.inputs[0].bytes.data(), binary.data(), binary.size()) == 0,
        "ferry's parse does not give back the values written");
  Check(NlohmannParse(body) == std::vector<uint8_t>(binary.begin(), binary.end()),
        "nlohmann's parse does not give back the values written");

  Timings t = TimeParse(body, binary, count);
  TimeEncode(values, rows, count, &t);
  double mb = static_cast<double>(body.size()) / 1e6;
  json report = {
      {"body_bytes", body.size()},
      {"rows", rows},
      {"parse_us",
       {{"ferry", t.ferry_s * 1e6},
        {"nlohmann", t.nlohmann_s * 1e6},
        {"memcpy_binary", t.memcpy_s * 1e6}}},
      {"parse_mb_per_s", {{"ferry", mb / t.ferry_s}, {"nlohmann", mb / t.nlohmann_s}}},
      {"parse_speedup_vs_nlohmann", t.nlohmann_s / t.ferry_s},
      {"parse_vs_memcpy", t.ferry_s / t.memcpy_s},
      {"encode_us", {{"ferry", t.encode_s * 1e6}, {"nlohmann", t.encode_nlohmann_s * 1e6}}},
      {"encode_speedup_vs_nlohmann", t.encode_nlohmann_s / t.encode_s}};
  if (as_json) {
    std::cout << report.dump() << "\n";
    return 0;
  }
  std::printf("body %zu bytes (%d x 784 FP32)\n", body.size(), rows);
  std::printf("parse   ferry %8.2f us  %7.1f MB/s\n", t.ferry_s * 1e6, mb / t.ferry_s);
  std::printf("parse   nlohmann %5.2f us  %7.1f MB/s  (ferry %.1fx faster)\n", t.nlohmann_s * 1e6,
              mb / t.nlohmann_s, t.nlohmann_s / t.ferry_s);
  std::printf("memcpy  binary %7.2f us  (ferry's parse costs %.0fx the copy)\n", t.memcpy_s * 1e6,
              t.ferry_s / t.memcpy_s);
  std::printf("encode  ferry %8.2f us, nlohmann %.2f us (%.1fx)\n", t.encode_s * 1e6,
              t.encode_nlohmann_s * 1e6, t.encode_nlohmann_s / t.encode_s);
  return 0;
}
