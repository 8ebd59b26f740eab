#include "supervisor/region_broker.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/thread_name.h"

namespace ferry::supervisor {
namespace {

constexpr uint64_t kWakeTag = ~uint64_t{0};

Error Off() {
  return PermissionDenied(
      "system shared memory is off on this node: [frontend] system_shared_memory = true in the "
      "node file turns it on");
}

// `key` under `directory`: never following a link, never waiting on a FIFO; for writing when
// allowed, else for reading. The descriptor and whether it is writable.
Result<std::pair<int, bool>> OpenObject(const std::string& directory, const std::string& key) {
  std::string path = directory + key;
  int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  bool writable = true;
  int fd = open(path.c_str(), flags | O_RDWR);
  if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
    writable = false;
    fd = open(path.c_str(), flags | O_RDONLY);
  }
  if (fd < 0) {
    if (errno == ENOENT) {
      return NotFound("no shared-memory object '" + key + "' (shm_open it before registering)");
    }
    return InvalidArgument("shared-memory object '" + key +
                           "' cannot be opened: " + std::strerror(errno));
  }
  return std::pair{fd, writable};
}

}  // namespace

RegionBroker::RegionBroker(bool enabled, std::string directory)
    : enabled_(enabled), directory_(std::move(directory)) {}

RegionBroker::~RegionBroker() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    Wake();
    thread_.join();
  }
  for (auto& [slot, fd] : attached_) {
    close(fd);
  }
  for (auto& [name, region] : regions_) {
    close(region.fd);
  }
  for (auto& [slot, fd] : sockets_) {
    close(fd);
  }
  for (int fd : {epoll_fd_, wake_fd_}) {
    if (fd >= 0) {
      close(fd);
    }
  }
}

Status RegionBroker::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return Internal(std::string("region broker: ") + std::strerror(errno));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  thread_ = std::thread([this] {
    NameThisThread("ferry-regions");
    Serve();
  });
  Wake();  // Sockets attached before the thread ran.
  return OkStatus();
}

void RegionBroker::Attach(uint32_t slot, int fd) {
  {
    std::lock_guard lock(mu_);
    attached_.emplace_back(slot, fd);
  }
  Wake();
}

void RegionBroker::Wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t w = write(wake_fd_, &one, sizeof one);
}

bool RegionBroker::TakeAttached() {
  std::vector<std::pair<uint32_t, int>> attached;
  uint64_t count;
  [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof count);
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      return false;
    }
    attached.swap(attached_);
  }
  for (auto [slot, fd] : attached) {
    if (auto it = sockets_.find(slot); it != sockets_.end()) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second, nullptr);
      close(it->second);
    }
    sockets_[slot] = fd;
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = static_cast<uint64_t>(fd);
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
  }
  return true;
}

size_t RegionBroker::size() const {
  std::lock_guard lock(mu_);
  return regions_.size();
}

void RegionBroker::Serve() {
  epoll_event events[16];
  for (;;) {
    int n = epoll_wait(epoll_fd_, events, 16, -1);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeTag) {
        if (!TakeAttached()) {
          return;
        }
        continue;
      }
      ServeOne(static_cast<int>(events[i].data.u64));
    }
  }
}

bool RegionBroker::WellFormed(const shm::RegionRequest& request, size_t bytes) {
  return bytes >= shm::RequestBytes(0) && request.count <= shm::kMaxClientRegions &&
         bytes == shm::RequestBytes(request.count) &&
         request.op >= static_cast<uint32_t>(shm::RegionOp::kRegister) &&
         request.op <= static_cast<uint32_t>(shm::RegionOp::kOpen);
}

void RegionBroker::ServeOne(int fd) {
  // An event of this batch for a socket replaced (closed) earlier in it: not ours any more.
  if (std::none_of(sockets_.begin(), sockets_.end(),
                   [fd](const auto& slot) { return slot.second == fd; })) {
    return;
  }
  auto request = std::make_unique<shm::RegionRequest>();
  std::vector<int> received;
  Result<size_t> got =
      shm::ReceivePacket(fd, request.get(), sizeof *request, &received, MSG_DONTWAIT);
  for (int stray : received) {  // A hook host sends no descriptors.
    close(stray);
  }
  if (got.ok() && *got == 0) {
    return;  // Nothing waiting after all.
  }
  // A hook host that sends what no hook host would, or that does not read its replies, is
  // dropped (its next call fails; a restarted one gets a new socket), never served or waited
  // on again.
  if (!got.ok() || !WellFormed(*request, *got)) {
    spdlog::warn("region socket: {}; dropped",
                 got.ok() ? "a malformed request" : got.error().message);
    Drop(fd);
    return;
  }
  std::vector<int> fds;
  auto reply = std::make_unique<shm::RegionReply>(Handle(*request, *got, &fds));
  if (!shm::SendPacket(fd, reply.get(), shm::ReplyBytes(reply->count), fds, MSG_DONTWAIT).ok()) {
    Drop(fd);
  }
}

void RegionBroker::Drop(int fd) {
  for (auto it = sockets_.begin(); it != sockets_.end(); ++it) {
    if (it->second == fd) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      close(fd);
      sockets_.erase(it);
      return;
    }
  }
}

shm::RegionReply RegionBroker::Handle(const shm::RegionRequest& request, size_t bytes,
                                      std::vector<int>* fds) {
  shm::RegionReply reply{};
  fds->clear();
  if (!WellFormed(request, bytes)) {
    shm::SetReplyError(reply, InvalidArgument("a malformed region request"));
    return reply;
  }
  reply.sequence = request.sequence;
  Status done = OkStatus();
  switch (static_cast<shm::RegionOp>(request.op)) {
    case shm::RegionOp::kRegister:
      done = request.count != 1 ? InvalidArgument("a registration names one region")
                                : Register(request.entries[0], request.tenant);
      break;
    case shm::RegionOp::kUnregister:
      done = Unregister(request);
      break;
    case shm::RegionOp::kStatus:
      Describe(request, &reply);
      return reply;
    case shm::RegionOp::kOpen:
      Open(request, &reply, fds);
      return reply;
    default:
      done = InvalidArgument("an unknown region operation");
  }
  if (!done.ok()) {
    shm::SetReplyError(reply, done.error());
  }
  return reply;
}

Status RegionBroker::Register(const shm::RegionEntry& entry, uint32_t tenant) {
  if (!enabled_) {
    return Off();
  }
  FERRY_ASSIGN_OR_RETURN(std::string name, shm::EntryName(entry));
  FERRY_ASSIGN_OR_RETURN(std::string key, shm::EntryKey(entry));
  if (!shm::IsRegionName(name)) {
    return InvalidArgument("a region's name is 1 to 127 letters, digits, '_', '.' or '-'");
  }
  FERRY_RETURN_IF_ERROR(shm::CheckRegionKey(key));
  if (entry.byte_size == 0 || entry.offset > UINT64_MAX - entry.byte_size) {
    return InvalidArgument("region '" + name + "': byte_size must be positive and offset + " +
                           "byte_size must not overflow");
  }
  FERRY_RETURN_IF_ERROR(Room(name, tenant));
  FERRY_ASSIGN_OR_RETURN(auto opened, OpenObject(directory_, key));
  auto [fd, writable] = opened;
  struct stat st {};
  Status fits = OkStatus();
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    fits = InvalidArgument("shared-memory object '" + key + "' is not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) < entry.offset + entry.byte_size) {
    fits = InvalidArgument("region '" + name + "': offset " + std::to_string(entry.offset) +
                           " + byte_size " + std::to_string(entry.byte_size) + " is past the " +
                           std::to_string(st.st_size) + " bytes of '" + key + "'");
  }
  if (!fits.ok()) {
    close(fd);
    return fits;
  }
  std::lock_guard lock(mu_);  // Only this thread adds: Room's answer still holds.
  Region& region = regions_[{tenant, name}];
  region.entry = shm::MakeEntry(name, key, entry.offset, entry.byte_size);
  region.entry.writable = writable ? 1 : 0;
  region.entry.tenant = tenant;
  region.fd = fd;
  spdlog::info("shared-memory region '{}' registered: {} bytes of {} at {}{}", name,
               entry.byte_size, key, entry.offset, writable ? "" : " (read-only)");
  return OkStatus();
}

Status RegionBroker::Unregister(const shm::RegionRequest& request) {
  if (request.count > 1) {
    return InvalidArgument("an unregistration names one region or none (all)");
  }
  std::lock_guard lock(mu_);
  if (request.count == 0) {
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second.entry.tenant == request.tenant) {
        close(it->second.fd);
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
    return OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(std::string name, shm::EntryName(request.entries[0]));
  // Triton's rule: unregistering a region that is not registered is not an error.
  if (auto it = Find(name, request.tenant); it != regions_.end()) {
    close(it->second.fd);
    regions_.erase(it);
  }
  return OkStatus();
}

RegionBroker::Regions::const_iterator RegionBroker::Find(const std::string& name,
                                                         uint32_t tenant) const {
  return regions_.find({tenant, name});
}

Status RegionBroker::Room(const std::string& name, uint32_t tenant) const {
  std::lock_guard lock(mu_);
  if (regions_.count({tenant, name}) != 0) {
    return InvalidArgument("region '" + name + "' is already registered (unregister it first)");
  }
  size_t own = 0;
  for (const auto& [key, region] : regions_) {
    own += key.first == tenant ? 1 : 0;
  }
  if (own >= shm::kMaxTenantRegions || regions_.size() >= shm::kMaxClientRegions) {
    return ResourceExhausted("at most " + std::to_string(shm::kMaxTenantRegions) +
                             " regions per tenant and " + std::to_string(shm::kMaxClientRegions) +
                             " per node: unregister one first");
  }
  return OkStatus();
}

void RegionBroker::Describe(const shm::RegionRequest& request, shm::RegionReply* reply) const {
  std::lock_guard lock(mu_);
  if (request.count == 0) {
    for (const auto& [name, region] : regions_) {
      if (region.entry.tenant == request.tenant) {
        reply->entries[reply->count++] = region.entry;
      }
    }
    return;
  }
  Result<std::string> name = shm::EntryName(request.entries[0]);
  auto it = name.ok() ? Find(*name, request.tenant) : regions_.end();
  if (request.count != 1 || it == regions_.end()) {
    shm::SetReplyError(
        *reply, NotFound("no shared-memory region '" + (name.ok() ? name->substr(0, 128) : "") +
                         "' is registered"));
    return;
  }
  reply->entries[reply->count++] = it->second.entry;
}

void RegionBroker::Open(const shm::RegionRequest& request, shm::RegionReply* reply,
                        std::vector<int>* fds) {
  std::lock_guard lock(mu_);
  for (uint32_t i = 0; i < request.count; ++i) {
    Result<std::string> name = shm::EntryName(request.entries[i]);
    auto it = name.ok() ? Find(*name, request.tenant) : regions_.end();
    if (it == regions_.end()) {
      fds->clear();
      shm::SetReplyError(
          *reply, NotFound("no shared-memory region '" + (name.ok() ? name->substr(0, 128) : "") +
                           "' is registered"));
      return;
    }
    reply->entries[reply->count++] = it->second.entry;
    fds->push_back(it->second.fd);
  }
}

}  // namespace ferry::supervisor
