// Backend modules for backend_module_test, one per FERRY_FAKE_MODULE:
//   1: another build's ABI string;  2: our ABI, create fails with a reason;
//   3: our ABI, create returns a SimBackend (a module that works, without CUDA).
#include <cstdio>

#include "worker/backends/backend_module.h"
#include "worker/backends/sim/sim_backend.h"

extern "C" {

__attribute__((visibility("default"))) const char* ferry_backend_abi() {
#if FERRY_FAKE_MODULE == 1
  return "ferry-backend-0 from another build";
#else
  return ferry::kBackendModuleAbi;
#endif
}

__attribute__((visibility("default"))) ferry::Backend* ferry_create_backend(
    const FerryBackendArgs* args, char* error, size_t error_size) {
#if FERRY_FAKE_MODULE == 3
  (void)error;
  (void)error_size;
  return args->num_regions == 1 ? new ferry::SimBackend() : nullptr;
#else
  std::snprintf(error, error_size, "fake: no device %d here", args->device);
  return nullptr;
#endif
}

}  // extern "C"
