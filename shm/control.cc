#include "shm/control.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/log_settings.h"
#include "config/scheduler_config.h"
#include "shm/descriptor.h"

namespace ferry::shm {

namespace {
// Model names are at most 128 bytes (kMaxModelName); the field holds them with their NUL.
constexpr size_t kMaxControlName = 136;
static_assert(sizeof(DescriptorData::tensors) >= kMaxControlName);
// Rings copy only the tensors a descriptor declares: a name spans this many.
constexpr uint16_t kNameTensors =
    (kMaxControlName + sizeof(TensorRefData) - 1) / sizeof(TensorRefData);
}  // namespace

DescriptorData EncodeControl(const ControlMessage& message, uint64_t sequence) {
  DescriptorData d{};
  d.kind = static_cast<uint16_t>(DescriptorKind::kControl);
  d.variant = static_cast<int32_t>(message.code);
  d.model = static_cast<uint16_t>(message.model);
  d.rows = message.value;
  d.sequence = sequence;
  std::memcpy(&d.trace_id_low, &message.weight, sizeof(double));
  auto* names = reinterpret_cast<char*>(d.tensors);
  size_t n = std::min(message.name.size(), kMaxControlName - 1);
  std::memcpy(names, message.name.data(), n);
  names[n] = '\0';
  if (!message.name.empty()) {
    d.num_tensors = kNameTensors;
  }
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
      d.variant > static_cast<int32_t>(ControlCode::kSetLogSettings)) {
    return InvalidArgument(where + "unknown command " + std::to_string(d.variant));
  }
  m.code = static_cast<ControlCode>(d.variant);
  bool names_model = m.code == ControlCode::kSetPolicy || m.code == ControlCode::kSetResidency ||
                     m.code == ControlCode::kSetMaxBatchSize ||
                     m.code == ControlCode::kUnloadModel ||
                     m.code == ControlCode::kSetResidencyFloor;
  if (m.code == ControlCode::kLoadModel) {
    if (m.model != num_models) {
      return InvalidArgument(where + "a load must name the next index, " +
                             std::to_string(num_models) + ", not " + std::to_string(m.model));
    }
    const auto* names = reinterpret_cast<const char*>(d.tensors);
    size_t length =
        d.num_tensors < kNameTensors ? kMaxControlName : strnlen(names, kMaxControlName);
    m.name.assign(names, length);
    if (length == kMaxControlName || !IsValidModelKey(m.name)) {
      return InvalidArgument(where + "the model name to load is not a valid name");
    }
  }
  if (names_model && m.model >= num_models) {
    return InvalidArgument(where + "model " + std::to_string(m.model) + " out of range (" +
                           std::to_string(num_models) + " models)");
  }
  if (m.code == ControlCode::kSetTenantWeight &&
      (m.value < 1 || m.value > static_cast<int32_t>(kMaxTenants))) {
    return InvalidArgument(where + "tenant " + std::to_string(m.value) + " out of range");
  }
  if ((m.code == ControlCode::kSetPolicy || m.code == ControlCode::kSetTenantWeight) &&
      !(std::isfinite(m.weight) && m.weight > 0)) {
    return InvalidArgument(where + "weight must be finite and > 0");
  }
  // Residency: pinned, warm, on_demand; discipline: fair, fifo, edf.
  bool ranged = m.code == ControlCode::kSetResidency || m.code == ControlCode::kSetDiscipline ||
                m.code == ControlCode::kSetResidencyFloor;
  if (ranged && (m.value < 0 || m.value > 2)) {
    return InvalidArgument(where + "value " + std::to_string(m.value) + " out of range");
  }
  if (m.code == ControlCode::kSetMaxBatchSize && m.value < 0) {
    return InvalidArgument(where + "max batch size " + std::to_string(m.value) + " is negative");
  }
  if (LogSettings unused;
      m.code == ControlCode::kSetLogSettings && !LogSettings::Decode(m.value, &unused)) {
    return InvalidArgument(where + "log settings " + std::to_string(m.value) + " malformed");
  }
  if (m.code == ControlCode::kSetMaxQueueDepth && m.value < 1) {
    return InvalidArgument(where + "queue depth " + std::to_string(m.value) + " is below 1");
  }
  return m;
}

}  // namespace ferry::shm
