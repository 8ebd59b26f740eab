#include "hookhost/frontend/shared_memory_http.h"

#include <nlohmann/json.hpp>

#include "hookhost/frontend/kserve_codec.h"
#include "hookhost/frontend/kserve_service.h"

namespace ferry::frontend {
namespace {

using nlohmann::json;

constexpr size_t kMaxRegisterBodyBytes = 4096;

net::HttpResponse Answer(const Status& status) {
  if (!status.ok()) {
    return ErrorResponse(status.error());
  }
  net::HttpResponse ok;
  ok.status = 200;
  return ok;
}

// The register body's key, offset and byte_size.
Status Register(ClientRegions& regions, std::string_view name, const std::string& body,
                uint32_t tenant) {
  json doc = body.size() <= kMaxRegisterBodyBytes && JsonDepthWithin(body, 4)
                 ? json::parse(body, nullptr, false)
                 : json();
  if (!doc.is_object() || !doc.contains("key") || !doc["key"].is_string()) {
    return InvalidArgument("the body must be a JSON object (at most 4 KiB) with a string \"key\"");
  }
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  for (auto [field, slot] : {std::pair{"offset", &offset}, std::pair{"byte_size", &byte_size}}) {
    if (doc.contains(field)) {
      if (!doc[field].is_number_unsigned()) {
        return InvalidArgument(std::string("\"") + field + "\" must be an unsigned integer");
      }
      *slot = doc[field].get<uint64_t>();
    }
  }
  return regions.Register(std::string(name), doc["key"].get<std::string>(), offset, byte_size,
                          tenant);
}

net::HttpResponse Cuda(std::string_view action) {
  if (action == "status") {
    return JsonAnswer(200, json::array());
  }
  if (action == "register") {
    return ErrorResponse(InvalidArgument(kCudaSharedMemoryRefusal));
  }
  return Answer(OkStatus());
}

}  // namespace

bool IsSharedMemoryPath(const std::vector<std::string_view>& parts) {
  return parts.size() >= 2 && (parts[1] == "systemsharedmemory" || parts[1] == "cudasharedmemory");
}

net::HttpResponse SharedMemoryHttp(ClientRegions* regions,
                                   const std::vector<std::string_view>& parts,
                                   const net::HttpRequest& request, uint32_t tenant) {
  // [v2, kind, action] or [v2, kind, region, NAME, action].
  bool named = parts.size() == 5 && parts[2] == "region";
  if (!named && parts.size() != 3) {
    return NoSuchEndpoint(request);
  }
  std::string_view action = parts.back();
  std::string_view name = named ? parts[3] : std::string_view();
  bool known = action == "status" || action == "unregister" || (action == "register" && named);
  if (!known) {
    return NoSuchEndpoint(request);
  }
  if ((action == "status") != (request.method == "GET") ||
      (request.method != "GET" && request.method != "POST")) {
    return MethodNotAllowed(request);
  }
  if (parts[1] == "cudasharedmemory") {
    return Cuda(action);
  }
  if (regions == nullptr) {
    return ErrorResponse(Unavailable("system shared memory is not served by this process"));
  }
  if (action == "register") {
    return Answer(Register(*regions, name, request.body, tenant));
  }
  if (action == "unregister") {
    return Answer(regions->Unregister(std::string(name), tenant));
  }
  Result<std::vector<RegionStatus>> status = regions->Describe(std::string(name), tenant);
  if (!status.ok()) {
    return ErrorResponse(status.error());
  }
  json list = json::array();
  for (const RegionStatus& r : *status) {
    list.push_back(
        {{"name", r.name}, {"key", r.key}, {"offset", r.offset}, {"byte_size", r.byte_size}});
  }
  return JsonAnswer(200, list);
}

}  // namespace ferry::frontend
