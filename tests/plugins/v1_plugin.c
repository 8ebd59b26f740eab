/* A plugin built against ABI version 1 (before pipelines): it exports ferry_plugin_entry_v1
 * and its table ends at postprocess. The host must still load it. */
#include <ferry/plugin.h>
#include <stddef.h>

static int32_t v1_create(const char* config, void** state, ferry_error* error) {
  (void)config;
  (void)error;
  *state = NULL;
  return FERRY_OK;
}

static void v1_destroy(void* state) { (void)state; }

static const ferry_plugin kV1 = {
    1, offsetof(ferry_plugin, run), 0, "v1", v1_create, v1_destroy, NULL, NULL, NULL};

const ferry_plugin* ferry_plugin_entry_v1(void) { return &kV1; }
