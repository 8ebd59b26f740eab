/* A plugin built for another ABI version: the host must refuse to load it. */
#include <ferry/plugin.h>

static const ferry_plugin kOld = {
    FERRY_PLUGIN_ABI_VERSION + 1, sizeof(ferry_plugin), 0, "old", NULL, NULL, NULL, NULL, NULL};

const ferry_plugin* ferry_plugin_entry_v2(void) { return &kOld; }
