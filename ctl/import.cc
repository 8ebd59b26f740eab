#include "ctl/import.h"

#include <algorithm>
#include <filesystem>

#include "config/scheduler_config.h"
#include "model/bundle.h"
#include "model/onnx/onnx_import.h"

namespace ferry::ctl {

int RunImport(const ImportCommand& command, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  std::string dir_name = fs::path(command.out_dir).lexically_normal().filename().string();
  std::string name = command.name.empty() ? dir_name : command.name;
  if (name != dir_name) {
    err << "ferryctl import: --name '" << name << "' must equal the bundle directory's name '"
        << dir_name << "' (a node finds a model by its directory)\n";
    return 2;
  }
  if (!IsValidModelName(name)) {
    err << "ferryctl import: '" << name << "' is not a valid model name (1-128 of "
        << "[A-Za-z0-9_.-])\n";
    return 2;
  }
  const std::vector<int64_t>& sizes = command.sizes;
  if (sizes.empty() || sizes.front() < 1 || !std::is_sorted(sizes.begin(), sizes.end()) ||
      std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
    err << "ferryctl import: --sizes must be positive and strictly ascending\n";
    return 2;
  }
  Result<onnx_import::OnnxModel> model = onnx_import::ReadOnnx(command.onnx_path);
  if (!model.ok()) {
    err << "ferryctl import: " << model.error().message << "\n";
    return 2;
  }
  Result<onnx_import::ImportedModel> imported =
      onnx_import::ConvertOnnx(*model, onnx_import::ImportOptions{name, sizes});
  if (!imported.ok()) {
    err << "ferryctl import: " << imported.error().message << "\n";
    return 2;
  }
  if (Status written = onnx_import::WriteBundle(*imported, command.out_dir); !written.ok()) {
    err << "ferryctl import: " << written.error().message << "\n";
    return 2;
  }
  Result<Bundle> bundle = LoadBundle(command.out_dir);
  if (!bundle.ok()) {
    err << "ferryctl import: the written bundle does not validate: " << bundle.error().message
        << "\n";
    return 2;
  }
  uint64_t bytes = 0;
  for (const onnx_import::Weight& w : imported->weights) {
    bytes += w.values.size() * sizeof(float);
  }
  out << "imported " << command.onnx_path << " (opset " << model->opset << ", "
      << imported->onnx_nodes << " nodes) as model '" << name
      << "': " << imported->manifest.program.size() << " ops, " << imported->weights.size()
      << " weights (" << bytes << " bytes)\nOK bundle " << command.out_dir << "\n";
  return 0;
}

}  // namespace ferry::ctl
