// DESIGN: backends that need libraries a CPU host lacks (the CUDA backend: cuBLAS, the CUDA
// runtime) live in their own shared object, loaded with dlopen by the worker only when its
// device needs one, as Triton keeps each backend apart. A CPU worker, ferryd, the hook hosts
// and ferryctl never map CUDA, and a host without CUDA runs the same package.
//
// The module and the worker pass C++ objects (a Backend) across the boundary, so both must
// come from the same build: the module exports its ABI string and the worker refuses any
// other. The module carries its own hidden copies of ferry's libraries (linked with
// --exclude-libs) and exports only the two C symbols below.
//
// Hostile by default: the module file must be a regular file (a FIFO would block dlopen),
// owned by root or the worker's own user and writable by no one else, since loading it runs
// its code in the worker.
//
// Thread safety: LoadBackendModule may be called from any thread (dlopen is thread-safe);
// the Backend it returns follows backend.h.
// Lifetime: a loaded module stays mapped until the process exits (its code backs the
// Backend's vtable; unloading it under a live object would be a use after free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/backends/backend.h"

// The module's side of the contract (C linkage, so dlsym finds it by name).
extern "C" {
struct FerryHostRegion {
  uint8_t* data;
  size_t size;
  int read_only;  // The worker maps it read-only (a hook host's arena).
};
struct FerryBackendArgs {
  int device;                      // The device ordinal the worker sees.
  const FerryHostRegion* regions;  // Host memory to page-lock for copies (may fail: logged).
  size_t num_regions;
};
// Returns the module's ABI string (kBackendModuleAbi as the module was built).
using FerryBackendAbiFn = const char* (*)();
// Creates the backend, or returns null and writes a NUL-terminated reason into `error`.
using FerryCreateBackendFn = ferry::Backend* (*)(const FerryBackendArgs* args, char* error,
                                                 size_t error_size);
}

namespace ferry {

inline constexpr const char* kBackendAbiSymbol = "ferry_backend_abi";
inline constexpr const char* kCreateBackendSymbol = "ferry_create_backend";
// Same build, same compiler, same standard library: the Backend's layout and vtable agree.
inline constexpr const char* kBackendModuleAbi =
    "ferry-backend-1 ferry " FERRY_VERSION_STRING " " __VERSION__;
// The CUDA backend's file name, and where it lies relative to the worker's executable
// (installed: PREFIX/libexec/ferry/ferry-worker and PREFIX/lib/ferry/backends; build tree:
// beside the worker).
inline constexpr const char* kCudaModuleName = "libferry_cuda.so";
std::vector<std::filesystem::path> DefaultModuleDirs(const std::filesystem::path& executable_dir);

// Loads `name` from the first of `dirs` that holds it and creates its backend for `args`.
// Errors name the device and the file: UNAVAILABLE when no directory holds the module (the
// package that carries it is not installed) or dlopen fails (the message is the loader's,
// naming the missing library, e.g. libcublas.so.13); INVALID_ARGUMENT when the file is not
// a regular file, is writable by others, lacks the entry points or is from another build;
// the module's own error when it cannot create the backend (no device, a driver older than
// its CUDA runtime).
Result<std::unique_ptr<Backend>> LoadBackendModule(const std::vector<std::filesystem::path>& dirs,
                                                   const std::string& name,
                                                   const FerryBackendArgs& args);

}  // namespace ferry
