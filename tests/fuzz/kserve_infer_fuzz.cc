// libFuzzer target: the KServe v2 infer body parser (hookhost/frontend/kserve_codec.h) on arbitrary
// bytes. The first byte picks where the JSON header ends (Inference-Header-Content-Length);
// the rest is the binary section. An accepted request's tensors must lie inside what was
// given and match their shapes, which the target checks by touching every byte. Its tensors
// are then answered back as outputs (names, types and values from the input): the response's
// JSON must parse (simdjson's DOM parser, which validates the whole document).
#include <simdjson.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hookhost/frontend/kserve_codec.h"
#include "tests/fuzz/accepted_tensors.h"

namespace {

void CheckEchoIsJson(const ferry::frontend::ParsedInfer& parsed) {
  ferry::hookhost::InferResponse response;
  for (const ferry::hookhost::ClientTensor& t : parsed.request.inputs) {
    response.outputs.push_back(
        {t.name, t.dtype, t.shape, std::vector<uint8_t>(t.bytes.begin(), t.bytes.end())});
  }
  ferry::Result<ferry::frontend::EncodedResponse> encoded =
      ferry::frontend::EncodeInferResponse(parsed.id, 1, parsed, response);
  if (!encoded.ok()) {
    return;  // A requested output the inputs do not have.
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::padded_string json(encoded->body.data(), encoded->json_bytes);
  if (parser.parse(json).get(doc) != simdjson::SUCCESS) {
    std::abort();  // The writer produced invalid JSON.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t split = all.size() * data[0] / 255;
  ferry::Result<ferry::frontend::ParsedInfer> parsed =
      ferry::frontend::ParseInferRequest(all.substr(0, split), all.substr(split));
  if (!parsed.ok()) {
    return 0;
  }
  CheckAcceptedTensors(*parsed);
  CheckEchoIsJson(*parsed);
  return 0;
}
