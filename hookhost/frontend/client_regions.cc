#include "hookhost/frontend/client_regions.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "model/dtype.h"

namespace ferry::frontend {
namespace {

std::string Named(const SharedTensor& place) { return "region '" + place.region + "'"; }

// `bytes` at `at` of `fd`, whole, into `out`; a short read means the object is shorter than
// registered (truncated under the request).
Status ReadAll(int fd, uint8_t* out, uint64_t bytes, uint64_t at, const SharedTensor& place) {
  while (bytes > 0) {
    ssize_t n = pread(fd, out, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return InvalidArgument(Named(place) + ": its object is shorter than registered (truncated?)");
    }
    out += n;
    at += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
  return OkStatus();
}

Status WriteAll(int fd, const uint8_t* data, uint64_t bytes, uint64_t at,
                const SharedTensor& place) {
  while (bytes > 0) {
    ssize_t n = pwrite(fd, data, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return InvalidArgument(Named(place) + ": writing failed: " + std::strerror(errno));
    }
    data += n;
    at += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
  return OkStatus();
}

}  // namespace

ClientRegions::ClientRegions(int socket, int reply_wait_ms)
    : socket_(socket), reply_wait_ms_(reply_wait_ms) {}

ClientRegions::~ClientRegions() { close(socket_); }

Result<std::unique_ptr<shm::RegionReply>> ClientRegions::Call(shm::RegionRequest& request,
                                                              std::vector<int>* opened) {
  auto reply = std::make_unique<shm::RegionReply>();
  std::vector<int> fds;
  std::lock_guard lock(mu_);
  request.sequence = ++sequence_;
  FERRY_RETURN_IF_ERROR(shm::SendPacket(socket_, &request, shm::RequestBytes(request.count)));
  int64_t until = MonotonicNs() + int64_t{reply_wait_ms_} * 1'000'000;
  size_t got = 0;
  for (;;) {  // Replies to earlier calls that gave up waiting are dropped, descriptors closed.
    int64_t left_ms = (until - MonotonicNs()) / 1'000'000;
    pollfd p{socket_, POLLIN, 0};
    int ready = left_ms <= 0 ? 0 : poll(&p, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) {
      continue;  // A signal: wait for what is left of the time.
    }
    if (ready != 1) {
      return Unavailable("ferryd's region broker did not answer");
    }
    FERRY_ASSIGN_OR_RETURN(got, shm::ReceivePacket(socket_, reply.get(), sizeof *reply, &fds));
    if (got >= shm::ReplyBytes(0) && reply->sequence == request.sequence) {
      break;
    }
    for (int fd : fds) {
      close(fd);
    }
  }
  bool sized = reply->count <= shm::kMaxClientRegions && got == shm::ReplyBytes(reply->count);
  bool fds_match = opened != nullptr && reply->code == 0 ? fds.size() == reply->count : fds.empty();
  if (!sized || !fds_match) {
    for (int fd : fds) {
      close(fd);
    }
    return Internal("a malformed reply from ferryd's region broker");
  }
  if (opened != nullptr) {
    *opened = std::move(fds);
  }
  return reply;
}

Status ClientRegions::Register(const std::string& name, const std::string& key, uint64_t offset,
                               uint64_t byte_size, uint32_t tenant) {
  if (!shm::IsRegionName(name)) {
    return InvalidArgument("a region's name is 1 to 127 letters, digits, '_', '.' or '-'");
  }
  FERRY_RETURN_IF_ERROR(shm::CheckRegionKey(key));
  auto request = std::make_unique<shm::RegionRequest>();
  request->op = static_cast<uint32_t>(shm::RegionOp::kRegister);
  request->tenant = tenant;
  request->count = 1;
  request->entries[0] = shm::MakeEntry(name, key, offset, byte_size);
  FERRY_ASSIGN_OR_RETURN(auto reply, Call(*request));
  return shm::ReplyStatus(*reply);
}

Status ClientRegions::Unregister(const std::string& name, uint32_t tenant) {
  if (!name.empty() && !shm::IsRegionName(name)) {
    return OkStatus();  // Never registered (Triton: not an error).
  }
  auto request = std::make_unique<shm::RegionRequest>();
  request->op = static_cast<uint32_t>(shm::RegionOp::kUnregister);
  request->tenant = tenant;
  request->count = name.empty() ? 0 : 1;
  request->entries[0] = shm::MakeEntry(name);
  FERRY_ASSIGN_OR_RETURN(auto reply, Call(*request));
  return shm::ReplyStatus(*reply);
}

Result<std::vector<RegionStatus>> ClientRegions::Describe(const std::string& name,
                                                          uint32_t tenant) {
  if (!name.empty() && !shm::IsRegionName(name)) {
    return NotFound("no shared-memory region '" + name.substr(0, 128) + "' is registered");
  }
  auto request = std::make_unique<shm::RegionRequest>();
  request->op = static_cast<uint32_t>(shm::RegionOp::kStatus);
  request->tenant = tenant;
  request->count = name.empty() ? 0 : 1;
  request->entries[0] = shm::MakeEntry(name);
  FERRY_ASSIGN_OR_RETURN(auto reply, Call(*request));
  FERRY_RETURN_IF_ERROR(shm::ReplyStatus(*reply));
  std::vector<RegionStatus> regions;
  for (uint32_t i = 0; i < reply->count; ++i) {
    FERRY_ASSIGN_OR_RETURN(std::string region, shm::EntryName(reply->entries[i]));
    FERRY_ASSIGN_OR_RETURN(std::string key, shm::EntryKey(reply->entries[i]));
    regions.push_back({region, key, reply->entries[i].offset, reply->entries[i].byte_size});
  }
  return regions;
}

Result<std::vector<ClientRegions::Opened>> ClientRegions::Open(
    const std::vector<const SharedTensor*>& places, uint32_t tenant) {
  auto request = std::make_unique<shm::RegionRequest>();
  request->op = static_cast<uint32_t>(shm::RegionOp::kOpen);
  request->tenant = tenant;
  std::vector<std::string> names;
  for (const SharedTensor* place : places) {
    if (request->count == shm::kMaxClientRegions) {
      return InvalidArgument("a request may name at most " +
                             std::to_string(shm::kMaxClientRegions) + " regions");
    }
    if (!shm::IsRegionName(place->region)) {
      return NotFound("no shared-memory region '" + place->region.substr(0, 128) +
                      "' is registered");
    }
    if (std::find(names.begin(), names.end(), place->region) == names.end()) {
      names.push_back(place->region);
      request->entries[request->count++] = shm::MakeEntry(place->region);
    }
  }
  std::vector<int> fds;
  FERRY_ASSIGN_OR_RETURN(auto reply, Call(*request, &fds));
  FERRY_RETURN_IF_ERROR(shm::ReplyStatus(*reply));
  std::vector<Opened> opened;
  for (uint32_t i = 0; i < reply->count; ++i) {
    opened.push_back({reply->entries[i], fds[i]});
  }
  if (opened.size() != names.size()) {
    CloseAll(opened);
    return Internal("ferryd's region broker answered another number of regions");
  }
  // The broker answers the names asked, in order: anything else is refused.
  for (uint32_t i = 0; i < reply->count; ++i) {
    Result<std::string> name = shm::EntryName(opened[i].entry);
    if (!name.ok() || *name != names[i]) {
      CloseAll(opened);
      return Internal("ferryd's region broker answered another region");
    }
  }
  return opened;
}

void ClientRegions::CloseAll(std::vector<Opened>& opened) {
  for (const Opened& o : opened) {
    close(o.fd);
  }
  opened.clear();
}

Result<const ClientRegions::Opened*> ClientRegions::Locate(const std::vector<Opened>& opened,
                                                           const SharedTensor& place) {
  for (const Opened& o : opened) {
    if (std::strncmp(o.entry.name, place.region.c_str(), sizeof o.entry.name) == 0) {
      if (place.offset > o.entry.byte_size || place.byte_size > o.entry.byte_size - place.offset) {
        return InvalidArgument(Named(place) + ": offset " + std::to_string(place.offset) +
                               " + byte_size " + std::to_string(place.byte_size) + " is past its " +
                               std::to_string(o.entry.byte_size) + " bytes");
      }
      return &o;
    }
  }
  return Internal("a region opened but not found");
}

Status ClientRegions::ReadInputs(const std::vector<std::pair<size_t, SharedTensor>>& inputs,
                                 uint32_t tenant, hookhost::InferRequest* request,
                                 std::vector<std::vector<uint8_t>>* storage) {
  std::vector<const SharedTensor*> places;
  for (const auto& [index, place] : inputs) {
    places.push_back(&place);
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<Opened> opened, Open(places, tenant));
  Status read = OkStatus();
  for (const auto& [index, place] : inputs) {
    hookhost::ClientTensor& tensor = request->inputs[index];
    Result<const Opened*> region = Locate(opened, place);
    if (!region.ok()) {
      read = region.error();
      break;
    }
    std::vector<uint8_t>& block = storage->emplace_back(place.byte_size);
    read = ReadAll((*region)->fd, block.data(), place.byte_size,
                   (*region)->entry.offset + place.offset, place);
    if (read.ok() && tensor.dtype == DType::kBytes) {
      if (Status formed = CheckBytesTensor(block, ElementCount(tensor.shape).value_or(0));
          !formed.ok()) {
        read = InvalidArgument("input '" + tensor.name + "': " + formed.error().message);
      }
    }
    if (!read.ok()) {
      break;
    }
    tensor.bytes = block;
  }
  CloseAll(opened);
  return read;
}

Status ClientRegions::WriteOutputs(
    const std::vector<std::pair<const hookhost::ResponseTensor*, SharedTensor>>& outputs,
    uint32_t tenant) {
  std::vector<const SharedTensor*> places;
  for (const auto& [tensor, place] : outputs) {
    places.push_back(&place);
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<Opened> opened, Open(places, tenant));
  Status written = OkStatus();
  for (const auto& [tensor, place] : outputs) {
    Result<const Opened*> region = Locate(opened, place);
    if (!region.ok()) {
      written = region.error();
    } else if ((*region)->entry.writable == 0) {
      written = InvalidArgument(Named(place) + " is read-only to ferry: outputs cannot go there");
    } else if (tensor->bytes.size() > place.byte_size) {
      written = InvalidArgument("output '" + tensor->name + "' is " +
                                std::to_string(tensor->bytes.size()) + " bytes; " + Named(place) +
                                " gives it " + std::to_string(place.byte_size));
    } else {
      written = WriteAll((*region)->fd, tensor->bytes.data(), tensor->bytes.size(),
                         (*region)->entry.offset + place.offset, place);
    }
    if (!written.ok()) {
      break;
    }
  }
  CloseAll(opened);
  return written;
}

}  // namespace ferry::frontend
