#include "hookhost/frontend/json_parameters.h"

#include "hookhost/frontend/kserve_codec.h"

namespace ferry::frontend {

namespace od = simdjson::ondemand;

// The first `max` bytes of `s`, cut back to a UTF-8 character boundary.
std::string Clip(std::string_view s, size_t max) {
  if (s.size() <= max) {
    return std::string(s);
  }
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) {
    --end;
  }
  return std::string(s.substr(0, end));
}

namespace {

// An unsigned integer, or "" for none; a string id is refused by name (kSequenceIdText).
Status ReadSequenceId(od::value& v, uint64_t* out) {
  od::json_type type;
  if (v.type().get(type)) {
    return InvalidArgument("parameter \"sequence_id\" is not valid JSON");
  }
  std::string_view text;
  if (type == od::json_type::string && !v.get_string().get(text)) {
    if (!text.empty()) {
      return InvalidArgument(kSequenceIdText);
    }
    *out = 0;
    return OkStatus();
  }
  if (type != od::json_type::number || v.get_uint64().get(*out)) {
    return InvalidArgument("parameter \"sequence_id\" must be an unsigned 64-bit integer");
  }
  return OkStatus();
}

}  // namespace

Status ReadParameters(od::value& value, JsonParameters* out) {
  od::object object;
  if (value.get_object().get(object)) {
    return InvalidArgument("\"parameters\" must be an object");
  }
  for (simdjson::simdjson_result<od::field> field : object) {
    std::string_view key;
    od::value v;
    if (field.unescaped_key().get(key) || field.value().get(v)) {
      return InvalidArgument("\"parameters\" is not valid JSON");
    }
    auto boolean = [&](std::optional<bool>* slot) -> Status {
      bool b;
      if (v.get_bool().get(b)) {
        return InvalidArgument("parameter \"" + std::string(key) + "\" must be a boolean");
      }
      *slot = b;
      return OkStatus();
    };
    auto integer = [&](std::optional<int64_t>* slot) -> Status {
      int64_t i;
      if (v.get_int64().get(i)) {
        return InvalidArgument("parameter \"" + std::string(key) + "\" must be an integer");
      }
      *slot = i;
      return OkStatus();
    };
    if (key == "binary_data_output") {
      FERRY_RETURN_IF_ERROR(boolean(&out->binary_data_output));
    } else if (key == "binary_data") {
      FERRY_RETURN_IF_ERROR(boolean(&out->binary_data));
    } else if (key == "timeout") {
      FERRY_RETURN_IF_ERROR(integer(&out->timeout));
    } else if (key == "priority") {
      FERRY_RETURN_IF_ERROR(integer(&out->priority));
    } else if (key == "binary_data_size") {
      FERRY_RETURN_IF_ERROR(integer(&out->binary_data_size));
    } else if (key == "tenant" || key == "shared_memory_region") {
      std::string_view s;
      if (v.get_string().get(s)) {
        return InvalidArgument("parameter \"" + std::string(key) + "\" must be a string");
      }
      (key == "tenant" ? out->tenant : out->shared_memory_region) = Clip(s, kMaxTenantNameBytes);
    } else if (key == "sequence_id") {
      FERRY_RETURN_IF_ERROR(ReadSequenceId(v, &out->sequence_id));
    } else if (key == "sequence_start" || key == "sequence_end") {
      std::optional<bool> flag;
      FERRY_RETURN_IF_ERROR(boolean(&flag));
      (key == "sequence_start" ? out->sequence_start : out->sequence_end) = *flag;
    } else if (key == "shared_memory_offset") {
      FERRY_RETURN_IF_ERROR(integer(&out->shared_memory_offset));
    } else if (key == "shared_memory_byte_size") {
      FERRY_RETURN_IF_ERROR(integer(&out->shared_memory_byte_size));
    }
  }
  return OkStatus();
}

}  // namespace ferry::frontend
