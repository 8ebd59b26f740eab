#include "worker/backends/repository.h"

namespace ferry {

ModelSpec SpecForModel(const RepositoryModel& model) {
  return SpecForBundle(model.name, model.bundle.get());
}

ModelSpec SpecForBundle(const std::string& name, const Bundle* bundle) {
  ModelSpec spec;
  spec.name = name;
  if (bundle == nullptr || bundle->manifest.pipeline()) {
    spec.batch_sizes = {1};
    return spec;
  }
  const Manifest& manifest = bundle->manifest;
  spec.batch_sizes = manifest.batch_sizes;
  spec.num_variants = static_cast<int>(manifest.variants.size());
  spec.coalescable = !manifest.unbatched() && manifest.all_batched();
  if (!manifest.inputs.empty()) {
    spec.wire_batch_input = manifest.inputs[0].name;
    spec.wire_batch_axis = manifest.inputs[0].batch_axis ? *manifest.inputs[0].batch_axis + 1 : 0;
  }
  return spec;
}

}  // namespace ferry
