// Control messages on a process's control ring (supervisor -> worker): what each command
// means and how it is packed into a descriptor. The supervisor encodes; the worker decodes
// and checks every field, since a descriptor is untrusted whoever wrote it.
//
// Packing (kind = kControl): `variant` holds the command code, `model` the model index,
// `rows` the residency or discipline, `trace_id_low` the weight as IEEE-754 bits, `sequence`
// the supervisor's sequence number; a model name (kLoadModel) in the bytes of `tensors`,
// NUL-terminated, `num_tensors` covering it (rings copy only the declared tensors).
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "shm/layout.h"

namespace ferry::shm {

enum class ControlCode : int32_t {
  kStop = 1,                // Fail queued requests (UNAVAILABLE), finish the execution, exit 0.
  kDrain = 2,               // Refuse new submissions, serve every queued one, then exit 0.
  kSetPolicy = 3,           // model, weight > 0.
  kSetResidency = 4,        // model, value = ferry::Residency (external residency mode only).
  kCompact = 5,             // Compact the weight arena.
  kSetDiscipline = 6,       // value = ferry::Discipline.
  kSetMaxBatchSize = 7,     // model, value = the cap (>= 1), or 0 for none.
  kSetMaxQueueDepth = 8,    // value >= 1, every model.
  kLoadModel = 9,           // model = the new model's index (the next one), name: its bundle.
  kUnloadModel = 10,        // model: refuse its new requests, serve its queued ones, free it.
  kSetResidencyFloor = 11,  // model, value = ferry::Residency: the node file's level changed by
                            // a reload (managed residency mode).
  kSetTenantWeight = 12,    // value = tenant number (1..kMaxTenants), weight > 0.
  kSetLogSettings = 13,     // value = LogSettings::Encode (common/log_settings.h).
};

struct ControlMessage {
  ControlCode code = ControlCode::kStop;
  uint32_t model = 0;
  double weight = 0;
  int32_t value = 0;
  std::string name;  // kLoadModel: a valid model name (model/bundle rules).
};

DescriptorData EncodeControl(const ControlMessage& message, uint64_t sequence);
// INVALID_ARGUMENT naming the field for another kind, an unknown code, a model at or above
// `num_models` (kLoadModel: other than `num_models`, the next index), a weight that is not
// finite and positive, a value out of its enum's range, or a load's name not NUL-terminated
// in its field or not a valid model name.
Result<ControlMessage> DecodeControl(const DescriptorData& descriptor, uint32_t num_models);

}  // namespace ferry::shm
