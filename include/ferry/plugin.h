/* ferry hook plugin ABI, version 1. Installed as <ferry/plugin.h>.
 *
 * A hook plugin is a shared object a model bundle names in its manifest ([hooks] plugin). It
 * runs inside a sandboxed ferry-hookhost, never in a worker: before a request is queued
 * (preprocess: the client's tensors in, the model's input tensors out) and after it ran
 * (postprocess: that request's slice of the model's outputs in, the response tensors out).
 *
 * The plugin exports one C function, ferry_plugin_entry_v1, returning its function table.
 * The host checks the table's abi_version and struct_size before using anything else, and
 * refuses a plugin built for another version with an error naming both versions.
 *
 * Rules (the host enforces what it can; a plugin that breaks the others only harms its host):
 *  - Nothing throws across this boundary; every call reports failure through its return code
 *    and the ferry_error it is handed. Codes are FERRY_ERR_* below.
 *  - Output tensors are never malloc'd by the plugin: it asks the host for each one with
 *    ferry_outputs.allocate, which returns a buffer of exactly the bytes of that dtype and
 *    shape in the hook host's shared-memory arena (256-byte aligned), or NULL (too large, bad
 *    rank or dtype, arena full). Each index may be allocated once per call.
 *  - Input tensors are read-only and valid only during the call.
 *  - create() runs once, before the sandbox; every other call runs after it is entered: no
 *    files can be opened, no sockets created, no processes started. Calls may run on several
 *    host threads at once: per-call state lives on the stack, shared state is the plugin's
 *    to synchronize.
 *  - The host bounds each call by [hooks] call_timeout_ms: a call past it fails its request
 *    (DEADLINE_EXCEEDED); the thread it runs on is written off (a running call cannot be
 *    stopped) and replaced, and a hook host with too many stuck calls exits to be restarted.
 *  - Version 1 has no pipeline (meta model) entry point yet; it will come as version 2.
 */
#ifndef FERRY_PLUGIN_H_
#define FERRY_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_PLUGIN_ABI_VERSION 1u
#define FERRY_MAX_RANK 8u
#define FERRY_ERROR_MESSAGE_BYTES 256u

/* Data types: the KServe v2 names in comments. Values are part of the ABI. */
typedef enum ferry_dtype {
  FERRY_BOOL = 0,  /* BOOL */
  FERRY_U8 = 1,    /* UINT8 */
  FERRY_I8 = 2,    /* INT8 */
  FERRY_U16 = 3,   /* UINT16 */
  FERRY_I16 = 4,   /* INT16 */
  FERRY_U32 = 5,   /* UINT32 */
  FERRY_I32 = 6,   /* INT32 */
  FERRY_U64 = 7,   /* UINT64 */
  FERRY_I64 = 8,   /* INT64 */
  FERRY_F16 = 9,   /* FP16 */
  FERRY_BF16 = 10, /* BF16 */
  FERRY_F32 = 11,  /* FP32 */
  FERRY_F64 = 12   /* FP64 */
} ferry_dtype;

/* Error codes: the canonical set (gRPC numbering is not used; these are ferry's). */
enum {
  FERRY_OK = 0,
  FERRY_ERR_INVALID_ARGUMENT = 1,   /* The request's tensors are wrong for this plugin. */
  FERRY_ERR_RESOURCE_EXHAUSTED = 3, /* allocate returned NULL. */
  FERRY_ERR_INTERNAL = 6            /* Anything else. */
};

typedef struct ferry_error {
  int32_t code;                            /* A FERRY_ERR_* value. */
  char message[FERRY_ERROR_MESSAGE_BYTES]; /* NUL-terminated; truncated by the writer. */
} ferry_error;

/* A tensor: dense, row-major, shape[0] the batch dimension where the model has one. */
typedef struct ferry_tensor {
  const char* name;
  uint32_t dtype; /* ferry_dtype */
  uint32_t rank;  /* <= FERRY_MAX_RANK */
  int64_t shape[FERRY_MAX_RANK];
  const void* data;
  uint64_t bytes; /* = product(shape) * size of dtype */
} ferry_tensor;

/* Where a call writes its results. `count` and `names` list the tensors the host expects
 * (the model's inputs for preprocess, the response's outputs for postprocess), in order. */
typedef struct ferry_outputs {
  uint32_t count;
  const char* const* names;
  void* host; /* Opaque; pass back unchanged. */
  /* A writable buffer for output `index` with that dtype and shape, or NULL. */
  void* (*allocate)(void* host, uint32_t index, uint32_t dtype, uint32_t rank,
                    const int64_t* shape);
} ferry_outputs;

#define FERRY_PLUGIN_PRESERVES_ROWS 1u /* preprocess maps client row i to model row i. */

typedef struct ferry_plugin {
  uint32_t abi_version; /* FERRY_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(ferry_plugin) */
  uint32_t flags;       /* FERRY_PLUGIN_* bits */
  const char* name;

  /* Called once per model using the plugin, before the sandbox. `config` is the manifest's
   * [hooks] config string ("" when absent). Returns FERRY_OK and sets *state, or fails. */
  int32_t (*create)(const char* config, void** state, ferry_error* error);
  void (*destroy)(void* state);

  /* Either may be NULL: the tensors then pass through unchanged. */
  int32_t (*preprocess)(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                        ferry_outputs* outputs, ferry_error* error);
  int32_t (*postprocess)(void* state, const ferry_tensor* outputs, uint32_t num_outputs,
                         ferry_outputs* response, ferry_error* error);
} ferry_plugin;

/* The one symbol a plugin exports. */
typedef const ferry_plugin* (*ferry_plugin_entry_fn)(void);
#define FERRY_PLUGIN_ENTRY_SYMBOL "ferry_plugin_entry_v1"

#ifdef __cplusplus
}
#endif

#endif /* FERRY_PLUGIN_H_ */
