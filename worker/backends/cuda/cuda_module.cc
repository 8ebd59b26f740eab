// libferry_cuda.so's entry points (worker/backends/backend_module.h): the CUDA backend behind the
// two C symbols the worker looks up. Everything else in the module is hidden.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "worker/backends/backend_module.h"
#include "worker/backends/cuda/cuda_backend.h"

namespace {

// The runtime this module carries and the driver's, for an error a user can act on.
std::string Versions() {
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  auto text = [](int v) {
    return v == 0 ? std::string("none")
                  : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  return "CUDA runtime " + text(runtime) + ", driver supports " + text(driver);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const char* ferry_backend_abi() {
  return ferry::kBackendModuleAbi;
}

__attribute__((visibility("default"))) ferry::Backend* ferry_create_backend(
    const FerryBackendArgs* args, char* error, size_t error_size) {
  ferry::CudaBackendOptions options;
  options.device = args->device;
  options.weight_arena_bytes = 0;  // From the device's free memory (ArenaBytesFor).
  ferry::Result<std::unique_ptr<ferry::CudaBackend>> cuda = ferry::CudaBackend::Create(options);
  if (!cuda.ok()) {
    std::snprintf(error, error_size, "%s (%s)", cuda.error().message.c_str(), Versions().c_str());
    return nullptr;
  }
  // Inputs are copied host-to-device straight from the hook hosts' arenas (mapped read-only
  // in the worker, so registered read-only), outputs into the worker's own arena.
  for (size_t i = 0; i < args->num_regions; ++i) {
    const FerryHostRegion& region = args->regions[i];
    (void)(*cuda)->RegisterHostMemory(std::span<uint8_t>(region.data, region.size),
                                      region.read_only != 0);
  }
  return cuda->release();
}

}  // extern "C"
