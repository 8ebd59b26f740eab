/* Example decoupled pipeline plugin (ABI version 3): one response per row, as each is ready.
 *
 *   run:  "input" FP32 [N, D] in; for each row i, one model call (the model named by the
 *         config, its input "input" FP32 [1, D]) and one response sent at once through
 *         host->send: "logits" FP32 [1, C] (the call's first output) and "row" INT64 [1, 1]
 *         (i). N responses, in row order; then run returns, which ends the request. A send
 *         that fails (the client cancelled its stream) ends the run with that error.
 *
 * The shape of a token streamer: each response leaves while the next is computed. Config
 * (the manifest's [hooks] config): model=M, the model run() calls ([pipeline] calls lists it).
 *
 * Built against <ferry/plugin.h> only. */
#include <ferry/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char model[128];
} config;

static int32_t fail(ferry_error* error, int32_t code, const char* message) {
  error->code = code;
  snprintf(error->message, sizeof(error->message), "%s", message);
  return code;
}

static int32_t stream_create(const char* text, void** state, ferry_error* error) {
  config* c = calloc(1, sizeof(config));
  if (c == NULL) {
    return fail(error, FERRY_ERR_INTERNAL, "out of memory");
  }
  if (strncmp(text, "model=", 6) != 0 || strlen(text + 6) == 0 ||
      strlen(text + 6) >= sizeof(c->model)) {
    free(c);
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "config: expected model=NAME");
  }
  snprintf(c->model, sizeof(c->model), "%s", text + 6);
  *state = c;
  return FERRY_OK;
}

static void stream_destroy(void* state) { free(state); }

static int32_t stream_run(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                          const ferry_host* host, ferry_outputs* unused, ferry_error* error) {
  const config* c = state;
  (void)unused; /* A decoupled run answers through send() alone. */
  if (host->send == NULL) {
    return fail(error, FERRY_ERR_INTERNAL, "not a decoupled pipeline ([pipeline] decoupled)");
  }
  if (num_inputs != 1 || inputs[0].dtype != FERRY_F32 || inputs[0].rank != 2) {
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "expected one FP32 input [N, D]");
  }
  const int64_t rows = inputs[0].shape[0], width = inputs[0].shape[1];
  const float* data = inputs[0].data;
  for (int64_t i = 0; i < rows; ++i) {
    ferry_tensor row = {"input", FERRY_F32, 2, {1, width}, data + i * width,
                        (uint64_t)width * sizeof(float)};
    ferry_call call = {c->model, &row, 1, 0, NULL};
    int32_t code = host->call(host->host, &call, 1, error);
    if (code != FERRY_OK) {
      return code; /* Names the model and why; a cancelled request included. */
    }
    if (call.num_outputs < 1 || call.outputs[0].dtype != FERRY_F32 ||
        call.outputs[0].rank != 2 || call.outputs[0].shape[0] != 1) {
      return fail(error, FERRY_ERR_INTERNAL, "the model gave no FP32 [1, C] output");
    }
    int64_t index = i;
    ferry_tensor out[2] = {call.outputs[0], {"row", FERRY_I64, 2, {1, 1}, &index, sizeof index}};
    out[0].name = "logits";
    code = host->send(host->host, out, 2, error);
    if (code != FERRY_OK) {
      return code;
    }
  }
  return FERRY_OK;
}

static const ferry_plugin kStream = {FERRY_PLUGIN_ABI_VERSION,
                                     sizeof(ferry_plugin),
                                     0,
                                     "row_stream",
                                     stream_create,
                                     stream_destroy,
                                     NULL,
                                     NULL,
                                     stream_run};

const ferry_plugin* ferry_plugin_entry_v2(void) { return &kStream; }
