/* ferry hook plugin ABI, version 3. Installed as <ferry/plugin.h>.
 *
 * A hook plugin is a shared object a model bundle names in its manifest ([hooks] plugin). It
 * runs inside a sandboxed ferry-hookhost, never in a worker: before a request is queued
 * (preprocess: the client's tensors in, the model's input tensors out) and after it ran
 * (postprocess: that request's slice of the model's outputs in, the response tensors out).
 *
 * A pipeline plugin (version 2) serves a pipeline bundle (kind = "pipeline", no program): its
 * run() gets the client's tensors and calls models through the host's call(), several at once
 * if it likes, then writes the response. docs/hooks.md shows both kinds.
 *
 * A decoupled pipeline (version 3; [pipeline] decoupled = true) answers a request with zero,
 * one or many responses: its run() sends each through the host's send() as it is ready, and
 * its return ends the request (Triton's decoupled models, served over gRPC ModelStreamInfer).
 *
 * The plugin exports one C function, ferry_plugin_entry_v2, returning its function table
 * (versions 2 and 3 share the table; version 3 adds ferry_host.send). The host checks the
 * table's abi_version and struct_size before using anything else, and refuses a plugin built
 * for another version with an error naming both versions. A version 1 plugin (exporting
 * ferry_plugin_entry_v1; its table is version 2's without run) still loads.
 *
 * Rules (the host enforces what it can; a plugin that breaks the others only harms its host):
 *  - Nothing throws across this boundary; every call reports failure through its return code
 *    and the ferry_error it is handed. Codes are FERRY_ERR_* below.
 *  - Output tensors are never malloc'd by the plugin: it asks the host for each one with
 *    ferry_outputs.allocate, which returns a buffer of exactly the bytes of that dtype and
 *    shape in the hook host's shared-memory arena (256-byte aligned), or NULL (too large, bad
 *    rank or dtype, arena full). Each index may be allocated once per call.
 *  - Input tensors are read-only and valid only during the call.
 *  - Loading (constructors) and create() run in the host's load sandbox: files can be read
 *    only beneath the plugin's own bundle directory and the system libraries, nothing can be
 *    written, no socket or process started; a thread may be started but must not outlive
 *    create() (the host refuses to start). Every other call runs in the serving sandbox: no
 *    files can be opened, no sockets created, no processes started. Calls may run on several
 *    host threads at once: per-call state lives on the stack, shared state is the plugin's
 *    to synchronize.
 *  - The host bounds each call by [hooks] call_timeout_ms: a call past it fails its request
 *    (DEADLINE_EXCEEDED); the thread it runs on is written off (a running call cannot be
 *    stopped) and replaced, and a hook host with too many stuck calls exits to be restarted.
 *  - run() may block in host->call(); the time spent waiting there does not count toward
 *    call_timeout_ms, the plugin's own time does. A run holds one hook thread while it lasts,
 *    so [hooks] threads bounds the pipeline runs in progress at once.
 */
#ifndef FERRY_PLUGIN_H_
#define FERRY_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_PLUGIN_ABI_VERSION 3u
#define FERRY_MAX_RANK 8u
#define FERRY_ERROR_MESSAGE_BYTES 256u
#define FERRY_MAX_CALLS 16u        /* Model calls per host->call(). */
#define FERRY_MAX_RESPONSES 65536u /* Responses per decoupled request (host->send). */
#define FERRY_MAX_CALL_TENSORS 8u  /* Inputs, and outputs, of one model call. */

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
  FERRY_F64 = 12,  /* FP64 */
  /* BYTES (text): each element a 4-byte little-endian length, then that many bytes; `bytes`
   * is the whole serialization (checked by the host element by element). Only in the client's
   * tensors a preprocess or run receives ([[hooks.inputs]] or a pipeline's [[inputs]]): never
   * allocated, never sent to a model. */
  FERRY_BYTES = 13
} ferry_dtype;

/* Error codes: the canonical set (gRPC numbering is not used; these are ferry's). A plugin
 * may pass on the code a model call failed with: the client then sees that code. */
enum {
  FERRY_OK = 0,
  FERRY_ERR_INVALID_ARGUMENT = 1,   /* The request's tensors are wrong for this plugin. */
  FERRY_ERR_NOT_FOUND = 2,          /* A model call named a model that does not exist. */
  FERRY_ERR_RESOURCE_EXHAUSTED = 3, /* allocate returned NULL; queues or arenas full. */
  FERRY_ERR_DEADLINE_EXCEEDED = 4,  /* The request's deadline passed during a model call. */
  FERRY_ERR_UNAVAILABLE = 5,        /* A model call found no worker (restarting, draining). */
  FERRY_ERR_INTERNAL = 6,           /* Anything else. */
  FERRY_ERR_CANCELLED = 7           /* A model call's client left: the request was cancelled. */
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
  uint64_t bytes; /* = product(shape) * size of dtype; for BYTES, its serialization's size */
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

/* One model call from a pipeline's run (version 2). The plugin fills the inputs; the host
 * fills the outputs. */
typedef struct ferry_call {
  const char* model;           /* A model the pipeline's manifest lists in [pipeline] calls. */
  const ferry_tensor* inputs;  /* The model's own [[inputs]] (its hooks do not run), by name. */
  uint32_t num_inputs;         /* <= FERRY_MAX_CALL_TENSORS */
  uint32_t num_outputs;        /* Set by the host: the model's [[outputs]], in manifest order, */
  const ferry_tensor* outputs; /* read-only, valid until run() returns. */
} ferry_call;

/* The host's side of a pipeline run. */
typedef struct ferry_host {
  void* host; /* Opaque; pass back unchanged. */
  /* Runs `count` (1..FERRY_MAX_CALLS) model calls at once (each queued on a worker that serves
   * its model, as one request with the pipeline request's deadline) and returns when every one
   * has finished: FERRY_OK with every call's outputs set, or the code of a call that failed,
   * with *error naming its model. The inputs are copied before call() returns. The first call
   * of a run queues like any request; later ones are the pipeline's continuations and are
   * dispatched ahead of new work (a pipeline that has started finishes first). Only from the
   * thread running run(), one call at a time (from another thread: INVALID_ARGUMENT). */
  int32_t (*call)(void* host, ferry_call* calls, uint32_t count, ferry_error* error);
  /* Version 3, a decoupled pipeline's run() only (else NULL): sends one response to the
   * client now. `outputs` are some of the pipeline's [[outputs]] (each at most once, with its
   * dtype and a shape its declaration allows), copied before send() returns FERRY_OK.
   * FERRY_ERR_CANCELLED once the client is gone (its stream cancelled or closed) or the
   * request ran past its deadline: run() should stop and return. At most
   * FERRY_MAX_RESPONSES per request. Only from the thread running run(). A decoupled run()'s
   * own `outputs` are unused (allocate returns NULL): its return ends the request. */
  int32_t (*send)(void* host, const ferry_tensor* outputs, uint32_t num_outputs,
                  ferry_error* error);
} ferry_host;

typedef struct ferry_plugin {
  uint32_t abi_version; /* FERRY_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(ferry_plugin) */
  uint32_t flags;       /* FERRY_PLUGIN_* bits */
  const char* name;

  /* Called once per model using the plugin, in the load sandbox. `config` is the manifest's
   * [hooks] config string ("" when absent). Returns FERRY_OK and sets *state, or fails. */
  int32_t (*create)(const char* config, void** state, ferry_error* error);
  void (*destroy)(void* state);

  /* Either may be NULL: the tensors then pass through unchanged. */
  int32_t (*preprocess)(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                        ferry_outputs* outputs, ferry_error* error);
  int32_t (*postprocess)(void* state, const ferry_tensor* outputs, uint32_t num_outputs,
                         ferry_outputs* response, ferry_error* error);

  /* Version 2. A pipeline's whole request: the client's tensors in (its [[inputs]]), the
   * response out (`outputs` lists its [[outputs]]), models called through `host` meanwhile.
   * NULL in a hook plugin; required by a pipeline bundle. */
  int32_t (*run)(void* state, const ferry_tensor* inputs, uint32_t num_inputs,
                 const ferry_host* host, ferry_outputs* outputs, ferry_error* error);
} ferry_plugin;

/* The one symbol a plugin exports. */
typedef const ferry_plugin* (*ferry_plugin_entry_fn)(void);
#define FERRY_PLUGIN_ENTRY_SYMBOL "ferry_plugin_entry_v2"
#define FERRY_PLUGIN_ENTRY_SYMBOL_V1 "ferry_plugin_entry_v1"

#ifdef __cplusplus
}
#endif

#endif /* FERRY_PLUGIN_H_ */
