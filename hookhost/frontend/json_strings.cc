#include "hookhost/frontend/json_strings.h"

#include <string>
#include <string_view>

#include "hookhost/frontend/kserve_codec.h"
#include "model/dtype.h"

namespace ferry::frontend {

namespace od = simdjson::ondemand;

Status AppendJsonStrings(od::value& data, int depth, uint64_t count, std::vector<uint8_t>* out,
                         uint64_t* read) {
  od::json_type type;
  if (data.type().get(type)) {
    return InvalidArgument("\"data\" is not valid JSON");
  }
  if (type == od::json_type::array) {
    od::array array;
    if (depth >= kMaxJsonDepth || data.get_array().get(array)) {
      return InvalidArgument("\"data\" nested deeper than " + std::to_string(kMaxJsonDepth));
    }
    for (simdjson::simdjson_result<od::value> item : array) {
      od::value v;
      if (item.get(v)) {
        return InvalidArgument("\"data\" is not valid JSON");
      }
      FERRY_RETURN_IF_ERROR(AppendJsonStrings(v, depth + 1, count, out, read));
    }
    return OkStatus();
  }
  std::string_view s;
  if (data.get_string().get(s)) {
    return InvalidArgument("element " + std::to_string(*read) + ": a string was expected");
  }
  if (*read >= count) {
    return InvalidArgument("more elements than its shape holds");
  }
  FERRY_RETURN_IF_ERROR(AppendBytesElement(s, out));
  ++*read;
  return OkStatus();
}

Status ReadJsonStrings(od::value& data, const std::string& name, uint64_t count, size_t text_bytes,
                       std::vector<uint8_t>* out) {
  if (count > text_bytes / 3 + 1) {  // "", takes 3 characters.
    return InvalidArgument("input '" + name + "': shape holds " + std::to_string(count) +
                           " elements but a body of " + std::to_string(text_bytes) +
                           " bytes cannot");
  }
  out->reserve(static_cast<size_t>(count) * 4);
  uint64_t read = 0;
  Status status = AppendJsonStrings(data, 0, count, out, &read);
  if (!status.ok()) {
    return InvalidArgument("input '" + name + "' " + status.error().message);
  }
  if (read != count) {
    return InvalidArgument("input '" + name + "': shape holds " + std::to_string(count) +
                           " elements but \"data\" has " + std::to_string(read));
  }
  return OkStatus();
}

}  // namespace ferry::frontend
