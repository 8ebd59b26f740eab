// The client side of KServe v2 infer over HTTP with binary tensors, for ferry's own tools
// (ferryctl infer, ferry-node-bench, tests): builds a request body and reads an answer.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/dtype.h"
#include "model/manifest.h"
#include "net/http_client.h"

namespace ferry::client {

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;
};

struct InferBody {
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Type, header length.
};

// Every input as binary data; every output asked for as binary. `parameters` (timeout,
// priority, ...) go into the request's parameters.
InferBody BuildInferBody(const std::vector<Tensor>& inputs,
                         const nlohmann::json& parameters = nlohmann::json::object());

struct InferAnswer {
  std::vector<Tensor> outputs;
  nlohmann::json parameters;  // The server's (timings, batch size).
};

// A 200 answer's outputs (binary or JSON data); otherwise the error the server sent, its code
// from the HTTP status (400 INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED,
// 504 DEADLINE_EXCEEDED, 503 UNAVAILABLE, 499 CANCELLED, else INTERNAL).
Result<InferAnswer> ReadInferAnswer(const net::HttpAnswer& answer);

}  // namespace ferry::client
