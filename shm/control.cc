#include "shm/control.h"

#include <cmath>
#include <cstring>
#include <string>

#include "shm/descriptor.h"

namespace ferry::shm {

DescriptorData EncodeControl(const ControlMessage& message, uint64_t sequence) {
  DescriptorData d{};
  d.kind = static_cast<uint16_t>(DescriptorKind::kControl);
  d.variant = static_cast<int32_t>(message.code);
  d.model = message.model;
  d.rows = message.value;
  d.sequence = sequence;
  std::memcpy(&d.trace_id_low, &message.weight, sizeof(double));
  return d;
}

Result<ControlMessage> DecodeControl(const DescriptorData& d, uint32_t num_models) {
  std::string where = "control " + std::to_string(d.sequence) + ": ";
  if (d.kind != static_cast<uint16_t>(DescriptorKind::kControl)) {
    return InvalidArgument(where + "kind " + std::to_string(d.kind) + " is not a control");
  }
  ControlMessage m;
  m.model = d.model;
  m.value = d.rows;
  std::memcpy(&m.weight, &d.trace_id_low, sizeof(double));
  if (d.variant < static_cast<int32_t>(ControlCode::kStop) ||
      d.variant > static_cast<int32_t>(ControlCode::kSetMaxQueueDepth)) {
    return InvalidArgument(where + "unknown command " + std::to_string(d.variant));
  }
  m.code = static_cast<ControlCode>(d.variant);
  bool names_model = m.code == ControlCode::kSetPolicy || m.code == ControlCode::kSetResidency ||
                     m.code == ControlCode::kSetMaxBatchSize;
  if (names_model && m.model >= num_models) {
    return InvalidArgument(where + "model " + std::to_string(m.model) + " out of range (" +
                           std::to_string(num_models) + " models)");
  }
  if (m.code == ControlCode::kSetPolicy && !(std::isfinite(m.weight) && m.weight > 0)) {
    return InvalidArgument(where + "weight must be finite and > 0");
  }
  // Residency: pinned, warm, on_demand; discipline: fair, fifo, edf.
  bool ranged = m.code == ControlCode::kSetResidency || m.code == ControlCode::kSetDiscipline;
  if (ranged && (m.value < 0 || m.value > 2)) {
    return InvalidArgument(where + "value " + std::to_string(m.value) + " out of range");
  }
  if (m.code == ControlCode::kSetMaxBatchSize && m.value < 0) {
    return InvalidArgument(where + "max batch size " + std::to_string(m.value) + " is negative");
  }
  if (m.code == ControlCode::kSetMaxQueueDepth && m.value < 1) {
    return InvalidArgument(where + "queue depth " + std::to_string(m.value) + " is below 1");
  }
  return m;
}

}  // namespace ferry::shm
