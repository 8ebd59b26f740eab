// The shared-memory extensions over HTTP (Triton's paths and bodies; docs/frontend.md,
// "Shared memory"):
//
//   GET  /v2/systemsharedmemory[/region/R]/status    [{name, key, offset, byte_size}, ...]
//   POST /v2/systemsharedmemory/region/R/register    {"key": K, "offset": O, "byte_size": B}
//   POST /v2/systemsharedmemory[/region/R]/unregister
//   GET  /v2/cudasharedmemory[/region/R]/status      [] (none can be registered)
//   POST /v2/cudasharedmemory/region/R/register      400: kCudaSharedMemoryRefusal
//   POST /v2/cudasharedmemory[/region/R]/unregister  200 (nothing to unregister)
//
// A register body is at most 4 KiB of JSON nested at most 4 deep; its fields are typed
// (offset and byte_size unsigned integers). Regions are the caller's tenant's (0: anonymous):
// another tenant's are neither listed nor usable.
//
// Thread safety: any thread (ClientRegions serializes its calls; each is one round trip to
// ferryd, which answers at once).
#pragma once

#include <string_view>
#include <vector>

#include "hookhost/frontend/client_regions.h"
#include "net/http_server.h"

namespace ferry::frontend {

// /v2/systemsharedmemory/... or /v2/cudasharedmemory/... (the path's parts).
bool IsSharedMemoryPath(const std::vector<std::string_view>& parts);

// `regions` null: a hook host without a region socket (tests' views): UNAVAILABLE.
net::HttpResponse SharedMemoryHttp(ClientRegions* regions,
                                   const std::vector<std::string_view>& parts,
                                   const net::HttpRequest& request, uint32_t tenant);

}  // namespace ferry::frontend
