#include "supervisor/devices.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace ferry::supervisor {

std::string WorkerDevice::Describe() const {
  if (!gpu) {
    return "CPU";
  }
  std::string text = "GPU " + std::to_string(gpu_id);
  return pci_bus_id.empty() ? text : text + " (" + pci_bus_id + ")";
}

namespace {

// PCI bus ids of the GPUs the driver lists, sorted (CUDA's PCI_BUS_ID order). Entries that are
// not directories are ignored; an absent directory means no GPU (no driver loaded).
std::vector<std::string> ListGpus(const std::string& dir) {
  std::vector<std::string> ids;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && ids.size() < 1024) {
      ids.push_back(it->path().filename().string());
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

Result<std::vector<WorkerDevice>> ResolveDevices(const NodeSettings& node,
                                                 const std::string& gpu_dir) {
  const DeviceSelection& selection = node.devices;
  std::vector<WorkerDevice> workers;
  if (selection.kind == DeviceSelection::Kind::kCpu) {
    workers.resize(static_cast<size_t>(selection.cpu_workers));
    return workers;
  }
  std::vector<std::string> found = ListGpus(gpu_dir);
  bool sim = node.backend == BackendKind::kSim;
  if (selection.kind == DeviceSelection::Kind::kAllGpus) {
    if (found.empty()) {
      return InvalidArgument("node.devices = \"all\" but no GPU was found in " + gpu_dir +
                             " (is the NVIDIA driver loaded?); use devices = \"cpu:N\" for CPU "
                             "workers");
    }
    for (size_t i = 0; i < found.size() && i < static_cast<size_t>(kMaxWorkers); ++i) {
      workers.push_back({true, static_cast<int>(i), found[i]});
    }
    return workers;
  }
  for (int64_t id : selection.gpu_ids) {
    bool present = id >= 0 && static_cast<size_t>(id) < found.size();
    if (!present && !sim) {
      return InvalidArgument("node.devices names GPU " + std::to_string(id) + " but " +
                             std::to_string(found.size()) + " GPU(s) were found in " + gpu_dir);
    }
    workers.push_back({true, static_cast<int>(id), present ? found[static_cast<size_t>(id)] : ""});
  }
  return workers;
}

}  // namespace ferry::supervisor
