/* Example hook plugin: text in, token ids out, for a text encoder (how text reaches a model:
 * programs compute on numbers, so clients' BYTES tensors go to a plugin).
 *
 *   preprocess: "text" BYTES [N] (one UTF-8 sentence per row)
 *               -> the model's ids input, INT64 [N, S], and its mask input, INT64 [N, S]:
 *                  row i holds sentence i's first S words' ids, then 0s; the mask is 1 where
 *                  a word is and 0 on the padding.
 *
 * A word is a run of ASCII letters and digits and of bytes >= 0x80 (so a UTF-8 letter stays
 * inside its word); ASCII letters are lowercased. Its id is 1 + FNV-1a(word) mod (V - 1), so
 * ids lie in [1, V - 1] and 0 is padding: a hashing vocabulary, as feature hashing uses, which
 * needs no vocabulary file.
 *
 * Config (the manifest's [hooks] config), space-separated key=value:
 *   seq=S        words per row, the model's sequence length (1..4096, required)
 *   vocab=V      rows of the model's embedding table (2..16777216, required)
 *   ids=NAME     the model input the ids go to (default "input")
 *   mask=NAME    the model input the mask goes to (default "mask"; "" for a model without one)
 *
 * Built against <ferry/plugin.h> only; keeps one client row per model row. */
#include <ferry/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t seq;
  int64_t vocab;
  char ids[128];
  char mask[128];
} config;

static int32_t fail(ferry_error* error, int32_t code, const char* message) {
  error->code = code;
  snprintf(error->message, sizeof(error->message), "%s", message);
  return code;
}

static int32_t tokenizer_create(const char* text, void** state, ferry_error* error) {
  config* c = calloc(1, sizeof(config));
  if (c == NULL) {
    return fail(error, FERRY_ERR_INTERNAL, "out of memory");
  }
  snprintf(c->ids, sizeof(c->ids), "input");
  snprintf(c->mask, sizeof(c->mask), "mask");
  char copy[512];
  snprintf(copy, sizeof(copy), "%s", text);
  for (char* token = strtok(copy, " "); token != NULL; token = strtok(NULL, " ")) {
    char* end = NULL;
    int ok = 0;
    if (strncmp(token, "seq=", 4) == 0) {
      c->seq = strtoll(token + 4, &end, 10);
      ok = *end == '\0' && c->seq >= 1 && c->seq <= 4096;
    } else if (strncmp(token, "vocab=", 6) == 0) {
      c->vocab = strtoll(token + 6, &end, 10);
      ok = *end == '\0' && c->vocab >= 2 && c->vocab <= (1 << 24);
    } else if (strncmp(token, "ids=", 4) == 0) {
      ok = snprintf(c->ids, sizeof(c->ids), "%s", token + 4) < (int)sizeof(c->ids);
    } else if (strncmp(token, "mask=", 5) == 0) {
      ok = snprintf(c->mask, sizeof(c->mask), "%s", token + 5) < (int)sizeof(c->mask);
    }
    if (!ok) {
      char message[FERRY_ERROR_MESSAGE_BYTES];
      snprintf(message, sizeof(message), "bad config entry '%s'", token);
      free(c);
      return fail(error, FERRY_ERR_INVALID_ARGUMENT, message);
    }
  }
  if (c->seq == 0 || c->vocab == 0) {
    free(c);
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "config needs seq=S and vocab=V");
  }
  *state = c;
  return FERRY_OK;
}

static void tokenizer_destroy(void* state) { free(state); }

static int word_byte(unsigned char b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b >= 0x80;
}

/* Writes the ids of `text` (`length` bytes) into ids[0..seq), 0 after the last word. */
static void tokenize(const config* c, const unsigned char* text, uint32_t length, int64_t* ids,
                     int64_t* mask) {
  int64_t n = 0;
  uint32_t i = 0;
  while (n < c->seq && i < length) {
    while (i < length && !word_byte(text[i])) ++i;
    if (i == length) break;
    uint64_t hash = 14695981039346656037ull; /* FNV-1a, 64 bits. */
    while (i < length && word_byte(text[i])) {
      unsigned char b = text[i++];
      if (b >= 'A' && b <= 'Z') b = (unsigned char)(b - 'A' + 'a');
      hash = (hash ^ b) * 1099511628211ull;
    }
    ids[n] = 1 + (int64_t)(hash % (uint64_t)(c->vocab - 1));
    if (mask != NULL) mask[n] = 1;
    ++n;
  }
  for (; n < c->seq; ++n) {
    ids[n] = 0;
    if (mask != NULL) mask[n] = 0;
  }
}

static int32_t tokenizer_preprocess(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                                    ferry_outputs* outputs, ferry_error* error) {
  const config* c = state;
  if (num_inputs != 1 || inputs[0].dtype != FERRY_BYTES || inputs[0].rank != 1) {
    return fail(error, FERRY_ERR_INVALID_ARGUMENT, "expected one BYTES tensor [N] of sentences");
  }
  int ids_index = -1, mask_index = -1;
  for (uint32_t o = 0; o < outputs->count; ++o) {
    if (strcmp(outputs->names[o], c->ids) == 0) ids_index = (int)o;
    if (c->mask[0] != '\0' && strcmp(outputs->names[o], c->mask) == 0) mask_index = (int)o;
  }
  if (ids_index < 0 || (c->mask[0] != '\0' && mask_index < 0)) {
    return fail(error, FERRY_ERR_INTERNAL, "the model has no input named as the config's ids/mask");
  }
  int64_t rows = inputs[0].shape[0];
  int64_t shape[2] = {rows, c->seq};
  int64_t* ids = outputs->allocate(outputs->host, (uint32_t)ids_index, FERRY_I64, 2, shape);
  int64_t* mask = mask_index < 0 ? NULL
                                 : outputs->allocate(outputs->host, (uint32_t)mask_index,
                                                     FERRY_I64, 2, shape);
  if (ids == NULL || (mask_index >= 0 && mask == NULL)) {
    return fail(error, FERRY_ERR_RESOURCE_EXHAUSTED, "no room for the ids");
  }
  /* The host checked the serialization: rows elements, each a length and its bytes. */
  const unsigned char* at = inputs[0].data;
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t length = (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 |
                      (uint32_t)at[3] << 24;
    tokenize(c, at + 4, length, ids + r * c->seq, mask == NULL ? NULL : mask + r * c->seq);
    at += 4 + (size_t)length;
  }
  return FERRY_OK;
}

static const ferry_plugin kPlugin = {
    .abi_version = FERRY_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ferry_plugin),
    .flags = FERRY_PLUGIN_PRESERVES_ROWS,
    .name = "tokenizer",
    .create = tokenizer_create,
    .destroy = tokenizer_destroy,
    .preprocess = tokenizer_preprocess,
    .postprocess = NULL,
    .run = NULL,
};

const ferry_plugin* ferry_plugin_entry_v2(void) { return &kPlugin; }
