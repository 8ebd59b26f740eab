// Which worker processes a node runs, and on which device: [node] devices resolved against the
// GPUs present, without creating a CUDA context in ferryd (a context would pin memory on every
// GPU and make ferryd a GPU process that a driver fault could take down).
//
// GPUs are found in /proc/driver/nvidia/gpus (one directory per GPU, named by PCI bus id).
// Their ordinal is the rank of the bus id, which is CUDA's order under
// CUDA_DEVICE_ORDER=PCI_BUS_ID; ferryd sets that for its workers, so "GPU 2" here and in the
// worker is the same device.
//
// Thread safety: pure functions (ResolveDevices reads the directory it is given).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "config/node_config.h"

namespace ferry::supervisor {

struct WorkerDevice {
  bool gpu = false;
  int gpu_id = -1;               // The device's ordinal (PCI bus order) when gpu.
  std::string pci_bus_id;        // When gpu, e.g. "0000:17:00.0".
  std::string Describe() const;  // "GPU 2 (0000:17:00.0)" or "CPU".
};

inline constexpr const char* kNvidiaGpuDir = "/proc/driver/nvidia/gpus";

// One entry per worker. "cpu:N": N CPU workers; [ids]: each id must be a GPU found;
// "all": every GPU found, and at least one. With backend = "sim", GPU selections still name
// the workers (one per device) but are not required to exist.
// INVALID_ARGUMENT naming the missing id, or saying no GPU was found, and where it looked.
Result<std::vector<WorkerDevice>> ResolveDevices(const NodeSettings& node,
                                                 const std::string& gpu_dir = kNvidiaGpuDir);

}  // namespace ferry::supervisor
