/* A pipeline plugin for the tests: its config names what run() does with host->call().
 *
 * Clients send "x" FP32 [N, 784] and "f" FP32 [N, 64]; the response is "logits" FP32 [N, 10]
 * and "probs" FP32 [N, 10]. Actions:
 *   parallel      one host->call running mlp(x) and cnn_head(f) at once; their outputs answer
 *   sequential    the same two calls one after the other (the second is committed)
 *   unlisted      calls cnn_features, which [pipeline] calls does not list
 *   wrong_shape   calls mlp with f as its input
 * and hostile calls, each answered by the host with an error the plugin passes on:
 *   null_calls (calls = NULL), too_many (17 calls), zero (0 calls), null_model (model NULL),
 *   long_model (a name with no NUL in 300 bytes), lying_bytes (bytes != shape x dtype),
 *   null_data (bytes > 0, data NULL), bad_dtype, too_many_inputs (9 inputs).
 * A decoupled run (ABI version 3): send3 sends three responses ("logits" FP32 [1, 10] filled
 * with 0, 1, 2) and stops at the first send that fails, returning its code; send_lying sends
 * one whose bytes lie; send_null sends a NULL array of one tensor. */
#include <ferry/plugin.h>

/* pipeline_probe_v2.so is this file built for ABI version 2 (no send): a version 2 table
 * through the current header still loads. */
#ifndef PROBE_ABI_VERSION
#define PROBE_ABI_VERSION FERRY_PLUGIN_ABI_VERSION
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t probe_create(const char* config, void** state, ferry_error* error) {
  (void)error;
  *state = strdup(config);
  return *state != NULL ? FERRY_OK : FERRY_ERR_INTERNAL;
}

static void probe_destroy(void* state) { free(state); }

static int32_t fail(ferry_error* error, const char* message) {
  error->code = FERRY_ERR_INTERNAL;
  snprintf(error->message, sizeof(error->message), "%s", message);
  return FERRY_ERR_INTERNAL;
}

/* Copies a call's first output into response output `index`. */
static int32_t answer(ferry_outputs* response, uint32_t index, const ferry_call* call,
                      ferry_error* error) {
  if (call->num_outputs < 1) return fail(error, "a call came back without outputs");
  const ferry_tensor* t = &call->outputs[0];
  void* out = response->allocate(response->host, index, t->dtype, t->rank, t->shape);
  if (out == NULL) return fail(error, "no room for the response");
  memcpy(out, t->data, t->bytes);
  return FERRY_OK;
}

static int32_t probe_run(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                         const ferry_host* host, ferry_outputs* response, ferry_error* error) {
  const char* action = state;
  if (num_inputs != 2) return fail(error, "expected x and f");
  const ferry_tensor* x = strcmp(inputs[0].name, "x") == 0 ? &inputs[0] : &inputs[1];
  const ferry_tensor* f = x == &inputs[0] ? &inputs[1] : &inputs[0];
  ferry_tensor mlp_in = *x;
  mlp_in.name = "input";
  ferry_tensor head_in = *f;
  head_in.name = "features";
  ferry_call calls[17];
  memset(calls, 0, sizeof(calls));
  for (int i = 0; i < 17; ++i) {
    calls[i].model = "mlp";
    calls[i].inputs = &mlp_in;
    calls[i].num_inputs = 1;
  }
  calls[1].model = "cnn_head";
  calls[1].inputs = &head_in;
  uint32_t count = 2;
  ferry_tensor bad = mlp_in;
  ferry_tensor nine[9];
  char long_name[300];
  if (strncmp(action, "send", 4) == 0) {
    if (host->send == NULL) return fail(error, "host->send is NULL (not decoupled)");
    float values[10];
    ferry_tensor logits = {"logits", FERRY_F32, 2, {1, 10}, values, sizeof(values)};
    if (strcmp(action, "send_lying") == 0) {
      logits.bytes = 4000;
      return host->send(host->host, &logits, 1, error);
    }
    if (strcmp(action, "send_null") == 0) return host->send(host->host, NULL, 1, error);
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 10; ++k) values[k] = (float)i;
      int32_t code = host->send(host->host, &logits, 1, error);
      if (code != FERRY_OK) return code;
    }
    return FERRY_OK;
  }
  if (strcmp(action, "parallel") == 0) {
    int32_t code = host->call(host->host, calls, 2, error);
    if (code != FERRY_OK) return code;
    code = answer(response, 0, &calls[0], error);
    return code != FERRY_OK ? code : answer(response, 1, &calls[1], error);
  }
  if (strcmp(action, "sequential") == 0) {
    int32_t code = host->call(host->host, &calls[0], 1, error);
    if (code != FERRY_OK) return code;
    code = host->call(host->host, &calls[1], 1, error);
    if (code != FERRY_OK) return code;
    code = answer(response, 0, &calls[0], error); /* Still valid: until run returns. */
    return code != FERRY_OK ? code : answer(response, 1, &calls[1], error);
  }
  if (strcmp(action, "unlisted") == 0) {
    calls[0].model = "cnn_features";
    count = 1;
  } else if (strcmp(action, "wrong_shape") == 0) {
    calls[0].inputs = &head_in;
    head_in.name = "input";
    count = 1;
  } else if (strcmp(action, "null_calls") == 0) {
    return host->call(host->host, NULL, 1, error);
  } else if (strcmp(action, "too_many") == 0) {
    count = 17;
  } else if (strcmp(action, "zero") == 0) {
    count = 0;
  } else if (strcmp(action, "null_model") == 0) {
    calls[0].model = NULL;
  } else if (strcmp(action, "long_model") == 0) {
    memset(long_name, 'm', sizeof(long_name));
    calls[0].model = long_name;
  } else if (strcmp(action, "lying_bytes") == 0) {
    bad.bytes = x->bytes * 1000;
    calls[0].inputs = &bad;
  } else if (strcmp(action, "null_data") == 0) {
    bad.data = NULL;
    calls[0].inputs = &bad;
  } else if (strcmp(action, "bad_dtype") == 0) {
    bad.dtype = 99;
    calls[0].inputs = &bad;
  } else if (strcmp(action, "too_many_inputs") == 0) {
    for (int i = 0; i < 9; ++i) nine[i] = mlp_in;
    calls[0].inputs = nine;
    calls[0].num_inputs = 9;
  } else {
    return fail(error, "unknown action");
  }
  int32_t code = host->call(host->host, calls, count, error);
  return code != FERRY_OK ? code : fail(error, "the host accepted what it should refuse");
}

static const ferry_plugin kProbe = {PROBE_ABI_VERSION,
                                    sizeof(ferry_plugin),
                                    0,
                                    "pipeline_probe",
                                    probe_create,
                                    probe_destroy,
                                    NULL,
                                    NULL,
                                    probe_run};

const ferry_plugin* ferry_plugin_entry_v2(void) { return &kProbe; }
