/* Example hook plugin for an image classifier (the example CNN), and the example pipeline:
 *
 *   preprocess:  "image" UINT8 [N, H, W, 3] (interleaved RGB, as decoded from a file)
 *                -> the model's first input, FP32 [N, 3, H, W], (x / 255 - mean[c]) / std[c]
 *   postprocess: the model's first output, FP32 [N, C] (probabilities, or logits with
 *                softmax = 1) -> "scores" FP32 [N, k] and "classes" INT64 [N, k], the k most
 *                likely classes in descending order (ties: the lower class first)
 *   run:         (a pipeline, ABI version 2) "image" as above, normalised, then two model
 *                calls chained: the features model ("image" FP32 [N, 3, H, W] -> its first
 *                output, the CNN's features) into the head model (its input "features" ->
 *                its first output, probabilities), then "scores" and "classes" as above
 *
 * Config (the manifest's [hooks] config), space-separated key=value:
 *   mean=R,G,B std=R,G,B   per-channel normalisation (default 0.5,0.5,0.5 and 0.25,0.25,0.25)
 *   k=N                    classes reported per row, 1..64 (default 3)
 *   softmax=0|1            apply softmax first (default 0: the model already ends in one)
 *   features=M head=M      the models run() calls (a pipeline's [pipeline] calls lists them)
 *
 * Built against <ferry/plugin.h> only; keeps one client row per model row. */
#include <ferry/plugin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  float mean[3];
  float inv_std[3];
  int k;
  int softmax;
  char features[128];
  char head[128];
} config;

static int32_t fail(ferry_error* error, int32_t code, const char* message) {
  error->code = code;
  snprintf(error->message, sizeof(error->message), "%s", message);
  return code;
}

static int parse_triple(const char* text, float out[3]) {
  return sscanf(text, "%f,%f,%f", &out[0], &out[1], &out[2]) == 3;
}

static int32_t classify_create(const char* text, void** state, ferry_error* error) {
  config* c = calloc(1, sizeof(config));
  if (c == NULL) {
    return fail(error, FERRY_ERR_INTERNAL, "out of memory");
  }
  float std[3] = {0.25f, 0.25f, 0.25f};
  for (int i = 0; i < 3; ++i) c->mean[i] = 0.5f;
  c->k = 3;
  char copy[512];
  snprintf(copy, sizeof(copy), "%s", text);
  for (char* token = strtok(copy, " "); token != NULL; token = strtok(NULL, " ")) {
    int ok = 0;
    if (strncmp(token, "mean=", 5) == 0) {
      ok = parse_triple(token + 5, c->mean);
    } else if (strncmp(token, "std=", 4) == 0) {
      ok = parse_triple(token + 4, std) && std[0] > 0 && std[1] > 0 && std[2] > 0;
    } else if (strncmp(token, "k=", 2) == 0) {
      c->k = atoi(token + 2);
      ok = c->k >= 1 && c->k <= 64;
    } else if (strncmp(token, "features=", 9) == 0) {
      ok = strlen(token + 9) < sizeof(c->features);
      snprintf(c->features, sizeof(c->features), "%s", token + 9);
    } else if (strncmp(token, "head=", 5) == 0) {
      ok = strlen(token + 5) < sizeof(c->head);
      snprintf(c->head, sizeof(c->head), "%s", token + 5);
    } else if (strncmp(token, "softmax=", 8) == 0) {
      c->softmax = atoi(token + 8);
      ok = c->softmax == 0 || c->softmax == 1;
    }
    if (!ok) {
      free(c);
      snprintf(error->message, sizeof(error->message), "bad config entry '%s'", token);
      error->code = FERRY_ERR_INVALID_ARGUMENT;
      return FERRY_ERR_INVALID_ARGUMENT;
    }
  }
  for (int i = 0; i < 3; ++i) c->inv_std[i] = 1.0f / std[i];
  *state = c;
  return FERRY_OK;
}

static void classify_destroy(void* state) { free(state); }

static int is_image(const ferry_tensor* inputs, uint32_t num_inputs) {
  return num_inputs == 1 && inputs[0].dtype == FERRY_U8 && inputs[0].rank == 4 &&
         inputs[0].shape[3] == 3;
}

/* UINT8 [n, h, w, 3] -> normalised FP32 [n, 3, h, w]. */
static void normalise(const config* c, const uint8_t* in, int64_t n, int64_t h, int64_t w,
                      float* out) {
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const uint8_t* pixel = in + ((b * h + y) * w + x) * 3;
        for (int ch = 0; ch < 3; ++ch) {
          out[((b * 3 + ch) * h + y) * w + x] =
              ((float)pixel[ch] / 255.0f - c->mean[ch]) * c->inv_std[ch];
        }
      }
    }
  }
}

static int32_t classify_preprocess(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                                   ferry_outputs* outputs, ferry_error* error) {
  const config* c = state;
  if (!is_image(inputs, num_inputs)) {
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "expected one UINT8 image [N, H, W, 3]");
  }
  const int64_t n = inputs[0].shape[0], h = inputs[0].shape[1], w = inputs[0].shape[2];
  int64_t shape[4] = {n, 3, h, w};
  float* out = outputs->allocate(outputs->host, 0, FERRY_F32, 4, shape);
  if (out == NULL) {
    return fail(error, FERRY_ERR_RESOURCE_EXHAUSTED, "no room for the preprocessed image");
  }
  normalise(c, inputs[0].data, n, h, w, out);
  return FERRY_OK;
}

static int32_t classify_postprocess(void* state, const ferry_tensor* model_outputs,
                                    uint32_t num_outputs, ferry_outputs* response,
                                    ferry_error* error) {
  const config* c = state;
  if (num_outputs < 1 || model_outputs[0].dtype != FERRY_F32 || model_outputs[0].rank != 2 ||
      response->count != 2) {
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "expected FP32 [N, C] and two responses");
  }
  const int64_t n = model_outputs[0].shape[0], classes = model_outputs[0].shape[1];
  const int64_t k = c->k < classes ? c->k : classes;
  int64_t shape[2] = {n, k};
  float* scores = response->allocate(response->host, 0, FERRY_F32, 2, shape);
  int64_t* labels = response->allocate(response->host, 1, FERRY_I64, 2, shape);
  if (scores == NULL || labels == NULL) {
    return fail(error, FERRY_ERR_RESOURCE_EXHAUSTED, "no room for the response");
  }
  const float* in = model_outputs[0].data;
  float row[4096];
  if (classes > 4096) {
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "more than 4096 classes");
  }
  for (int64_t b = 0; b < n; ++b) {
    memcpy(row, in + b * classes, (size_t)classes * sizeof(float));
    if (c->softmax) {
      float top = row[0];
      for (int64_t i = 1; i < classes; ++i) top = row[i] > top ? row[i] : top;
      double sum = 0;
      for (int64_t i = 0; i < classes; ++i) sum += exp((double)row[i] - top);
      for (int64_t i = 0; i < classes; ++i) row[i] = (float)(exp((double)row[i] - top) / sum);
    }
    for (int64_t j = 0; j < k; ++j) { /* Selection: k is small. */
      int64_t best = -1;
      for (int64_t i = 0; i < classes; ++i) {
        if (row[i] == -INFINITY) continue;
        if (best < 0 || row[i] > row[best]) best = i;
      }
      if (best < 0) best = 0;
      scores[b * k + j] = row[best];
      labels[b * k + j] = best;
      row[best] = -INFINITY;
    }
  }
  return FERRY_OK;
}

/* One model call: `input` named `name` in, the call's first output (FP32 [n, *]) out. */
static int32_t call_one(const ferry_host* host, const char* model, const char* name,
                        const float* data, uint32_t rank, const int64_t* shape,
                        const ferry_tensor** output, ferry_error* error) {
  ferry_tensor input = {name, FERRY_F32, rank, {0}, data, sizeof(float)};
  for (uint32_t i = 0; i < rank; ++i) {
    input.shape[i] = shape[i];
    input.bytes *= (uint64_t)shape[i];
  }
  ferry_call call = {model, &input, 1, 0, NULL};
  int32_t code = host->call(host->host, &call, 1, error);
  if (code != FERRY_OK) {
    return code; /* The host's error names the model and why; passed on as it is. */
  }
  if (call.num_outputs < 1 || call.outputs[0].dtype != FERRY_F32 || call.outputs[0].rank < 2 ||
      call.outputs[0].shape[0] != shape[0]) {
    snprintf(error->message, sizeof(error->message), "model '%s' gave no FP32 [N, ...] output",
             model);
    error->code = FERRY_ERR_INTERNAL;
    return FERRY_ERR_INTERNAL;
  }
  *output = &call.outputs[0];
  return FERRY_OK;
}

static int32_t classify_run(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                            const ferry_host* host, ferry_outputs* response, ferry_error* error) {
  const config* c = state;
  if (c->features[0] == '\0' || c->head[0] == '\0') {
    return fail(error, FERRY_ERR_INTERNAL, "run needs features= and head= in the config");
  }
  if (!is_image(inputs, num_inputs)) {
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "expected one UINT8 image [N, H, W, 3]");
  }
  const int64_t n = inputs[0].shape[0], h = inputs[0].shape[1], w = inputs[0].shape[2];
  int64_t shape[4] = {n, 3, h, w};
  float* image = malloc((size_t)(n * 3 * h * w) * sizeof(float));
  if (image == NULL) {
    return fail(error, FERRY_ERR_RESOURCE_EXHAUSTED, "out of memory");
  }
  normalise(c, inputs[0].data, n, h, w, image);
  const ferry_tensor* features = NULL;
  int32_t code = call_one(host, c->features, "image", image, 4, shape, &features, error);
  free(image); /* The host copied it. */
  if (code != FERRY_OK) {
    return code;
  }
  /* The features stay valid until run returns: chained into the head as they are. */
  const ferry_tensor* probs = NULL;
  code = call_one(host, c->head, "features", features->data, features->rank, features->shape,
                  &probs, error);
  if (code != FERRY_OK) {
    return code;
  }
  return classify_postprocess(state, probs, 1, response, error);
}

static const ferry_plugin kClassify = {
    FERRY_PLUGIN_ABI_VERSION, sizeof(ferry_plugin), FERRY_PLUGIN_PRESERVES_ROWS,
    "image_classify",         classify_create,      classify_destroy,
    classify_preprocess,      classify_postprocess, classify_run};

const ferry_plugin* ferry_plugin_entry_v2(void) { return &kClassify; }
