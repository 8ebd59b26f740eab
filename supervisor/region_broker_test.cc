// The system shared-memory extension's two ends over a real socket pair: ferryd's broker
// (registry, opening, tenants, bounds) and a hook host's ClientRegions (reading inputs and
// writing outputs), with the hostile cases: keys that are not keys, FIFOs and links, places
// past a region, a region truncated or unregistered under a request, malformed packets.
#include "supervisor/region_broker.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "hookhost/frontend/client_regions.h"

namespace ferry::supervisor {
namespace {

using frontend::ClientRegions;
using frontend::SharedTensor;

// A scratch directory standing for /dev/shm, a broker serving it and a client connected.
struct Rig {
  std::string dir;
  std::unique_ptr<RegionBroker> broker;
  std::unique_ptr<ClientRegions> client;

  explicit Rig(bool enabled = true) {
    char path[] = "/tmp/ferry-regions-XXXXXX";
    REQUIRE(mkdtemp(path) != nullptr);
    dir = path;
    broker = std::make_unique<RegionBroker>(enabled, dir);
    REQUIRE(broker->Start().ok());
    int pair[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    broker->Attach(0, pair[0]);
    client = std::make_unique<ClientRegions>(pair[1]);
  }
  ~Rig() {
    client.reset();
    broker.reset();
    std::filesystem::remove_all(dir);
  }
  // An object `key` of `size` bytes, byte i = i % 251.
  void Object(const std::string& key, size_t size) const {
    int fd = open((dir + key).c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    std::string bytes(size, '\0');
    for (size_t i = 0; i < size; ++i) {
      bytes[i] = static_cast<char>(i % 251);
    }
    REQUIRE(write(fd, bytes.data(), size) == static_cast<ssize_t>(size));
    close(fd);
  }
};

// Takes CAP_DAC_OVERRIDE out of this thread's effective set for its lifetime, and so out of
// the threads it starts meanwhile (the broker's): root opens a file for writing whatever its
// mode, so without this a mode-0444 object would be writable to a broker run as root (CI).
// Nothing to take for a user without it.
class NoDacOverride {
 public:
  NoDacOverride() {
    REQUIRE(syscall(SYS_capget, &header_, saved_) == 0);
    __user_cap_data_struct cut[2] = {saved_[0], saved_[1]};
    cut[0].effective &= ~(1u << CAP_DAC_OVERRIDE);
    REQUIRE(syscall(SYS_capset, &header_, cut) == 0);
  }
  ~NoDacOverride() { syscall(SYS_capset, &header_, saved_); }
  NoDacOverride(const NoDacOverride&) = delete;
  NoDacOverride& operator=(const NoDacOverride&) = delete;

 private:
  __user_cap_header_struct header_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2] = {};
};

size_t OpenDescriptors() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator()));
}

ErrorCode CodeOf(const Status& s) { return s.ok() ? ErrorCode::kInternal : s.error().code; }

TEST_CASE("register, status, unregister: Triton's rules") {
  Rig rig;
  rig.Object("/in", 4096);
  REQUIRE(rig.client->Register("input_data", "/in", 16, 1024, 0).ok());
  Result<std::vector<frontend::RegionStatus>> all = rig.client->Describe("", 0);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 1);
  CHECK((*all)[0].name == "input_data");
  CHECK((*all)[0].key == "/in");
  CHECK((*all)[0].offset == 16);
  CHECK((*all)[0].byte_size == 1024);
  // The same name again: refused, the first kept.
  Status again = rig.client->Register("input_data", "/in", 0, 8, 0);
  CHECK(CodeOf(again) == ErrorCode::kInvalidArgument);
  CHECK(again.error().message.find("already registered") != std::string::npos);
  Result<std::vector<frontend::RegionStatus>> none = rig.client->Describe("nope", 0);
  REQUIRE(!none.ok());
  CHECK(none.error().code == ErrorCode::kNotFound);
  // Unregistering one not registered is not an error (Triton's); unregistering removes.
  CHECK(rig.client->Unregister("nope", 0).ok());
  CHECK(rig.client->Unregister("input_data", 0).ok());
  CHECK(rig.broker->size() == 0);
}

TEST_CASE("off unless the node file turns it on") {
  Rig rig(false);
  rig.Object("/in", 64);
  Status refused = rig.client->Register("r", "/in", 0, 64, 0);
  CHECK(CodeOf(refused) == ErrorCode::kPermissionDenied);
  CHECK(refused.error().message.find("system_shared_memory") != std::string::npos);
}

TEST_CASE("hostile keys, objects and places are refused by name") {
  Rig rig;
  rig.Object("/in", 64);
  rig.Object("/ferry-node", 64);
  REQUIRE(mkfifo((rig.dir + "/fifo").c_str(), 0600) == 0);
  REQUIRE(symlink((rig.dir + "/in").c_str(), (rig.dir + "/link").c_str()) == 0);
  REQUIRE(mkdir((rig.dir + "/dir").c_str(), 0700) == 0);
  struct Case {
    const char* name;
    std::string key;
    uint64_t offset, size;
    ErrorCode code;
  };
  for (const Case& c : {
           Case{"r", "in", 0, 8, ErrorCode::kInvalidArgument},           // No slash.
           Case{"r", "/a/b", 0, 8, ErrorCode::kInvalidArgument},         // A path.
           Case{"r", "/..", 0, 8, ErrorCode::kInvalidArgument},          // Up.
           Case{"r", "/ferry-node", 0, 8, ErrorCode::kInvalidArgument},  // The node's own.
           Case{"r", "/" + std::string(300, 'a'), 0, 8, ErrorCode::kInvalidArgument},
           Case{"r", "/missing", 0, 8, ErrorCode::kNotFound},
           Case{"r", "/fifo", 0, 8, ErrorCode::kInvalidArgument},  // Not waited on.
           Case{"r", "/link", 0, 8, ErrorCode::kInvalidArgument},  // Not followed.
           Case{"r", "/dir", 0, 8, ErrorCode::kInvalidArgument},
           Case{"r", "/in", 0, 65, ErrorCode::kInvalidArgument},          // Past its end.
           Case{"r", "/in", 60, 8, ErrorCode::kInvalidArgument},          // Likewise.
           Case{"r", "/in", UINT64_MAX, 2, ErrorCode::kInvalidArgument},  // Overflow.
           Case{"r", "/in", 0, 0, ErrorCode::kInvalidArgument},           // Empty.
           Case{"a/b", "/in", 0, 8, ErrorCode::kInvalidArgument},         // Not a name.
           Case{"", "/in", 0, 8, ErrorCode::kInvalidArgument},
       }) {
    CAPTURE(c.key);
    CAPTURE(c.offset);
    Status s = rig.client->Register(c.name, c.key, c.offset, c.size, 0);
    CHECK(CodeOf(s) == c.code);
  }
  CHECK(rig.broker->size() == 0);
}

TEST_CASE("at most 16 regions a tenant and 64 a node; each region its tenant's own") {
  Rig rig;
  rig.Object("/in", 64);
  auto name = [](uint32_t tenant, uint32_t i) {
    return "t" + std::to_string(tenant) + "_" + std::to_string(i);
  };
  for (uint32_t tenant = 0; tenant < 4; ++tenant) {
    for (uint32_t i = 0; i < shm::kMaxTenantRegions; ++i) {
      REQUIRE(rig.client->Register(name(tenant, i), "/in", 0, 64, tenant).ok());
    }
  }
  CHECK(CodeOf(rig.client->Register("one_more", "/in", 0, 64, 0)) ==
        ErrorCode::kResourceExhausted);  // The tenant's bound.
  CHECK(CodeOf(rig.client->Register("one_more", "/in", 0, 64, 5)) ==
        ErrorCode::kResourceExhausted);  // The node's.
  // Tenant 1 sees its own 16, not tenant 0's; cannot unregister or use them.
  CHECK(rig.client->Describe("", 1)->size() == shm::kMaxTenantRegions);
  CHECK(!rig.client->Describe(name(0, 0), 1).ok());
  CHECK(rig.client->Unregister(name(0, 0), 1).ok());
  CHECK(rig.broker->size() == shm::kMaxClientRegions);
  hookhost::InferRequest request;
  request.inputs.push_back({"x", DType::kU8, {8}, {}});
  std::vector<std::vector<uint8_t>> storage;
  CHECK(CodeOf(rig.client->ReadInputs({{0, SharedTensor{name(0, 0), 0, 8}}}, 1, &request,
                                      &storage)) == ErrorCode::kNotFound);
  // Unregistering all is the tenant's all; a name is per tenant, so tenant 1 may take one
  // tenant 0 uses, and each reads its own.
  CHECK(rig.client->Unregister("", 1).ok());
  CHECK(rig.broker->size() == shm::kMaxClientRegions - shm::kMaxTenantRegions);
  CHECK(rig.client->Describe("", 0)->size() == shm::kMaxTenantRegions);
  rig.Object("/other", 64);
  REQUIRE(rig.client->Register(name(0, 0), "/other", 8, 8, 1).ok());
  CHECK(rig.client->Describe(name(0, 0), 1)->at(0).key == "/other");
  CHECK(rig.client->Describe(name(0, 0), 0)->at(0).key == "/in");
}

TEST_CASE("inputs read from a region; outputs written into one") {
  Rig rig;
  rig.Object("/io", 4096);
  REQUIRE(rig.client->Register("io", "/io", 100, 2000, 0).ok());
  hookhost::InferRequest request;
  request.inputs.push_back({"a", DType::kU8, {16}, {}});
  request.inputs.push_back({"b", DType::kU8, {4}, {}});
  std::vector<std::vector<uint8_t>> storage;
  REQUIRE(rig.client
              ->ReadInputs({{0, SharedTensor{"io", 0, 16}}, {1, SharedTensor{"io", 50, 4}}}, 0,
                           &request, &storage)
              .ok());
  REQUIRE(request.inputs[0].bytes.size() == 16);
  CHECK(request.inputs[0].bytes[0] == 100 % 251);  // The region's offset, then the place's.
  CHECK(request.inputs[1].bytes[0] == 150 % 251);
  // Past the region (not the object): refused.
  Status past = rig.client->ReadInputs({{0, SharedTensor{"io", 1990, 16}}}, 0, &request, &storage);
  CHECK(CodeOf(past) == ErrorCode::kInvalidArgument);
  CHECK(past.error().message.find("past its 2000 bytes") != std::string::npos);
  CHECK(CodeOf(rig.client->ReadInputs({{0, SharedTensor{"io", UINT64_MAX, 16}}}, 0, &request,
                                      &storage)) == ErrorCode::kInvalidArgument);

  hookhost::ResponseTensor out{"y", DType::kU8, {3}, {7, 8, 9}};
  REQUIRE(rig.client->WriteOutputs({{&out, SharedTensor{"io", 10, 3}}}, 0).ok());
  int fd = open((rig.dir + "/io").c_str(), O_RDONLY);
  uint8_t back[3] = {};
  REQUIRE(pread(fd, back, 3, 110) == 3);
  close(fd);
  CHECK(back[0] == 7);
  CHECK(back[2] == 9);
  // An output larger than its place: refused, nothing written past it.
  CHECK(CodeOf(rig.client->WriteOutputs({{&out, SharedTensor{"io", 10, 2}}}, 0)) ==
        ErrorCode::kInvalidArgument);
  // Unregistered while the request ran: its outputs are refused, not written.
  REQUIRE(rig.client->Unregister("io", 0).ok());
  CHECK(CodeOf(rig.client->WriteOutputs({{&out, SharedTensor{"io", 10, 3}}}, 0)) ==
        ErrorCode::kNotFound);
}

TEST_CASE("an object ferryd may only read registers read-only: inputs read, outputs refused") {
  NoDacOverride dropped;  // Before the rig: its broker's thread opens the objects.
  Rig rig;
  rig.Object("/ro", 256);
  REQUIRE(chmod((rig.dir + "/ro").c_str(), 0444) == 0);
  REQUIRE(open((rig.dir + "/ro").c_str(), O_RDWR) < 0);  // The premise: not writable here.
  Status registered = rig.client->Register("ro", "/ro", 32, 128, 0);
  REQUIRE_MESSAGE(registered.ok(), registered.error().ToString());
  hookhost::InferRequest request;
  request.inputs.push_back({"a", DType::kU8, {8}, {}});
  std::vector<std::vector<uint8_t>> storage;
  REQUIRE(rig.client->ReadInputs({{0, SharedTensor{"ro", 4, 8}}}, 0, &request, &storage).ok());
  CHECK(request.inputs[0].bytes[0] == 36);  // The region's offset, then the place's.

  hookhost::ResponseTensor out{"y", DType::kU8, {3}, {7, 8, 9}};
  Status written = rig.client->WriteOutputs({{&out, SharedTensor{"ro", 0, 3}}}, 0);
  CHECK(CodeOf(written) == ErrorCode::kInvalidArgument);
  CHECK(written.error().message.find("read-only to ferry") != std::string::npos);
  int fd = open((rig.dir + "/ro").c_str(), O_RDONLY);
  uint8_t back[3] = {};
  REQUIRE(pread(fd, back, 3, 32) == 3);
  close(fd);
  CHECK(back[0] == 32);  // Unchanged.
  CHECK(back[2] == 34);
}

TEST_CASE("a region truncated under a request is a short read, refused (no SIGBUS)") {
  Rig rig;
  rig.Object("/shrinks", 4096);
  REQUIRE(rig.client->Register("s", "/shrinks", 0, 4096, 0).ok());
  REQUIRE(truncate((rig.dir + "/shrinks").c_str(), 100) == 0);
  hookhost::InferRequest request;
  request.inputs.push_back({"a", DType::kU8, {1024}, {}});
  std::vector<std::vector<uint8_t>> storage;
  Status read = rig.client->ReadInputs({{0, SharedTensor{"s", 0, 1024}}}, 0, &request, &storage);
  CHECK(CodeOf(read) == ErrorCode::kInvalidArgument);
  CHECK(read.error().message.find("shorter than registered") != std::string::npos);
  // A BYTES input whose serialization lies about its lengths: refused when read.
  rig.Object("/bytes", 64);
  REQUIRE(rig.client->Register("b", "/bytes", 0, 64, 0).ok());
  request.inputs[0] = {"t", DType::kBytes, {1}, {}};
  CHECK(CodeOf(rig.client->ReadInputs({{0, SharedTensor{"b", 0, 64}}}, 0, &request, &storage)) ==
        ErrorCode::kInvalidArgument);
}

TEST_CASE("a restarted hook host's socket replaces its slot's; the registry stays") {
  Rig rig;
  rig.Object("/in", 64);
  REQUIRE(rig.client->Register("kept", "/in", 0, 64, 0).ok());
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  rig.broker->Attach(0, pair[0]);
  ClientRegions successor(pair[1]);
  Result<std::vector<frontend::RegionStatus>> seen = successor.Describe("", 0);
  REQUIRE(seen.ok());
  CHECK(seen->size() == 1);
  // The predecessor's socket is closed by the broker: its next call fails, not hangs.
  Result<std::vector<frontend::RegionStatus>> old = rig.client->Describe("", 0);
  REQUIRE(!old.ok());
  CHECK(old.error().code == ErrorCode::kUnavailable);
}

TEST_CASE("malformed packets are refused, their descriptors closed") {
  RegionBroker broker(true, "/nonexistent");
  auto request = std::make_unique<shm::RegionRequest>();
  std::vector<int> fds;
  request->op = 99;
  CHECK(shm::ReplyStatus(broker.Handle(*request, shm::RequestBytes(0), &fds)).error().code ==
        ErrorCode::kInvalidArgument);
  request->op = static_cast<uint32_t>(shm::RegionOp::kStatus);
  request->count = 1;
  CHECK(!shm::ReplyStatus(broker.Handle(*request, shm::RequestBytes(0), &fds)).ok());  // Short.
  request->count = shm::kMaxClientRegions + 1;
  CHECK(!shm::ReplyStatus(broker.Handle(*request, sizeof *request, &fds)).ok());
  request->op = static_cast<uint32_t>(shm::RegionOp::kRegister);
  request->count = 1;
  std::memset(request->entries[0].name, 'a', sizeof request->entries[0].name);  // Unterminated.
  CHECK(!shm::ReplyStatus(broker.Handle(*request, shm::RequestBytes(1), &fds)).ok());
  CHECK(broker.size() == 0);

  // A packet carrying descriptors and too large for its buffer: refused, each closed (the
  // process holds as many descriptors after as before).
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::string big(256, 'x');
  REQUIRE(shm::SendPacket(pair[0], big.data(), big.size(), {probe, probe, probe}).ok());
  size_t open_before = OpenDescriptors();
  char small[16];
  Result<size_t> got = shm::ReceivePacket(pair[1], small, sizeof small, &fds);
  CHECK(CodeOf(got.ok() ? OkStatus() : Status(got.error())) == ErrorCode::kInvalidArgument);
  CHECK(fds.empty());
  CHECK(OpenDescriptors() == open_before);
  close(probe);
  close(pair[0]);
  close(pair[1]);
}

TEST_CASE("a hook host sending a malformed request is dropped, not served again") {
  Rig rig;
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  rig.broker->Attach(1, pair[0]);
  std::string junk(7, 'x');  // Shorter than any request.
  REQUIRE(shm::SendPacket(pair[1], junk.data(), junk.size()).ok());
  char reply[8];
  std::vector<int> fds;
  // The broker closes its end instead of answering: the hook host reads the end of the stream.
  Result<size_t> got = shm::ReceivePacket(pair[1], reply, sizeof reply, &fds);
  REQUIRE(!got.ok());
  CHECK(got.error().code == ErrorCode::kUnavailable);
  close(pair[1]);
  CHECK(rig.client->Describe("", 0).ok());  // Another hook host is served as before.
}

TEST_CASE("a late reply is told apart by its sequence number and dropped") {
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  ClientRegions client(pair[1], 100);
  // A broker that answers the first call after the client gave up, then the second at once.
  std::thread peer([fd = pair[0]] {
    auto in = std::make_unique<shm::RegionRequest>();
    std::vector<int> fds;
    std::vector<uint32_t> sequences;
    for (int call = 0; call < 2; ++call) {
      if (!shm::ReceivePacket(fd, in.get(), sizeof *in, &fds).ok()) {
        return;
      }
      sequences.push_back(in->sequence);
    }
    for (uint32_t sequence :
         sequences) {  // The first call's reply (one region), then the second's.
      auto reply = std::make_unique<shm::RegionReply>();
      reply->sequence = sequence;
      reply->count = sequence == sequences[0] ? 1 : 0;
      reply->entries[0] = shm::MakeEntry("stale", "/stale", 0, 8);
      static_cast<void>(shm::SendPacket(fd, reply.get(), shm::ReplyBytes(reply->count)));
    }
  });
  Result<std::vector<frontend::RegionStatus>> first = client.Describe("", 0);
  REQUIRE(!first.ok());
  CHECK(first.error().code == ErrorCode::kUnavailable);  // Waited 100 ms, gave up.
  Result<std::vector<frontend::RegionStatus>> second = client.Describe("", 0);
  peer.join();
  REQUIRE(second.ok());
  CHECK(second->empty());  // Its own answer, not the first call's late one.
  close(pair[0]);
}

TEST_CASE("a broker answering wrongly is refused by the client, its descriptors closed") {
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  ClientRegions client(pair[1], 200);
  int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // A peer answering each call wrongly: 3 bytes of garbage (not a reply: dropped, the call
  // times out); a count the packet does not hold; an Open's reply without its descriptors,
  // and one with descriptors it did not ask for.
  std::thread peer([fd = pair[0], probe] {
    auto in = std::make_unique<shm::RegionRequest>();
    auto reply = std::make_unique<shm::RegionReply>();
    std::vector<int> fds;
    for (int call = 0; call < 4; ++call) {
      if (!shm::ReceivePacket(fd, in.get(), sizeof *in, &fds).ok()) {
        return;
      }
      *reply = {};
      reply->sequence = in->sequence;
      if (call == 0) {
        static_cast<void>(shm::SendPacket(fd, "bad", 3));
      } else if (call == 1) {
        reply->count = 3;
        static_cast<void>(shm::SendPacket(fd, reply.get(), shm::ReplyBytes(1)));
      } else {
        reply->count = 1;
        reply->entries[0] = shm::MakeEntry("r", "/r", 0, 8);
        static_cast<void>(
            shm::SendPacket(fd, reply.get(), shm::ReplyBytes(1),
                            call == 2 ? std::vector<int>{} : std::vector<int>{probe, probe}));
      }
    }
  });
  size_t open_before = OpenDescriptors();
  CHECK(client.Describe("", 0).error().code == ErrorCode::kUnavailable);
  CHECK(client.Describe("", 0).error().code == ErrorCode::kInternal);
  hookhost::ResponseTensor out{"y", DType::kU8, {1}, {1}};
  CHECK(CodeOf(client.WriteOutputs({{&out, SharedTensor{"r", 0, 1}}}, 0)) == ErrorCode::kInternal);
  CHECK(CodeOf(client.WriteOutputs({{&out, SharedTensor{"r", 0, 1}}}, 0)) == ErrorCode::kInternal);
  peer.join();
  CHECK(OpenDescriptors() == open_before);  // The two sent were closed.
  close(probe);
  close(pair[0]);
}

}  // namespace
}  // namespace ferry::supervisor
