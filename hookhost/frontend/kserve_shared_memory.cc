// KServeService's part for requests naming client regions (the system shared-memory
// extension; client_regions.h): inputs read on a hook thread before the request is submitted,
// outputs written on a hook thread before its answer is encoded.
#include <algorithm>

#include "hookhost/frontend/kserve_service.h"

namespace ferry::frontend {

bool KServeService::SharedMemoryStep(const hookhost::HookModel& model,
                                     const std::shared_ptr<ParsedInfer>& request,
                                     hookhost::InferCallback& done) {
  bool outputs = std::any_of(request->outputs.begin(), request->outputs.end(),
                             [](const RequestedOutput& o) { return o.shm.has_value(); });
  if (request->shm_inputs.empty() && !outputs) {
    return false;
  }
  auto refuse = [&](Error refused) {
    host_->CountRefused(&model, refused);
    done(std::move(refused));
    return true;
  };
  if (regions_ == nullptr) {
    return refuse(InvalidArgument("system shared memory is not served by this process"));
  }
  if (model.bundle != nullptr && model.manifest().decoupled) {
    return refuse(InvalidArgument("a decoupled model's tensors cannot be in shared memory"));
  }
  uint64_t bytes = 0;
  for (const auto& [index, place] : request->shm_inputs) {
    bytes += std::min<uint64_t>(place.byte_size, max_request_bytes_ + 1);
  }
  if (bytes > max_request_bytes_) {  // As a body would be: the region's size is no bound.
    return refuse(ResourceExhausted("the inputs in shared memory add up to more than " +
                                    std::to_string(max_request_bytes_) +
                                    " bytes ([frontend] max_request_bytes)"));
  }
  if (!request->shm_inputs.empty()) {  // Read on a hook thread, then submitted from there.
    host_->RunOnHookThread([this, &model, request, done = std::move(done)]() mutable {
      auto places = std::move(request->shm_inputs);
      request->shm_inputs.clear();
      if (Status read = regions_->ReadInputs(places, request->caller_tenant, &request->request,
                                             &request->storage);
          !read.ok()) {
        CountRefused(&model, read.error());
        done(read.error());
        return;
      }
      Submit(model, request, std::move(done));
    });
    return true;
  }
  // The answer may come on the transport thread, which must not block: the writes (a round
  // trip to ferryd and up to max_request_bytes of pwrite) go to a hook thread.
  done = [host = host_, regions = regions_, request,
          inner = std::move(done)](Result<hookhost::InferResponse> r) mutable {
    if (!r.ok()) {
      inner(std::move(r));
      return;
    }
    host->RunOnHookThread([regions, request, inner = std::move(inner), r = std::move(r)]() mutable {
      auto shared = SharedOutputs(*request, *r);
      Status written =
          shared.ok() ? regions->WriteOutputs(*shared, request->caller_tenant) : shared.error();
      if (!written.ok()) {
        inner(written.error());
        return;
      }
      inner(std::move(r));
    });
  };
  return false;
}

}  // namespace ferry::frontend
