// ferry-shm-bench [--json] [--check]: cross-process hand-off through ferry's shared-memory
// rings against a Unix domain socket carrying the same bytes, in one run. Two processes (fork),
// each attached to the segment as a real hook host and worker are (own object read-write,
// the peer's read-only), pinned to different CPUs when the machine has two or more.
//   handoff:   one-way latency of a typical one-tensor descriptor (152 bytes), one in flight:
//              - both sides spinning: the ring's consumer polls TryPop, the socket's reader
//                polls recv(MSG_DONTWAIT) (neither sleeps);
//              - the consumer asleep (the producer waits 300 us first): the ring's consumer
//                uses the production setting (WaitForWork, 2000 spins, then futex_waitv);
//                the socket's reader blocks in read().
//   throughput: descriptors per second, both sides busy; the socket's writer batches 64
//              descriptors per write and its reader reads up to 64 per read.
//   payload:   4 KiB, 64 KiB and 1 MiB tensors, the producer writes the bytes (into its arena
//              block / into the socket, one write per message), the consumer reads every byte
//              (a checksum) and answers with it; one in flight, both sides spinning. The time
//              is from the start of the producer's write to the consumer's checksum, p50.
// Every measurement warms up (a tenth of its count, at least 100) before it records.
// --check exits 1 when a ratio misses its target (docs/benchmarks.md states them).
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "shm/arena.h"
#include "shm/descriptor.h"
#include "shm/ring.h"

namespace {

using ferry::shm::DescriptorData;
using ferry::shm::RingStatus;
using ferry::shm::Segment;

constexpr uint32_t kHookhost = 0;  // The producer's slot.
constexpr uint32_t kWorker = 1;    // The consumer's slot.

// A typical submission: one input tensor (152 of the 768 bytes are used and cross cores).
DescriptorData Typical() {
  DescriptorData d{};
  d.kind = static_cast<uint16_t>(ferry::shm::DescriptorKind::kSubmit);
  d.rows = 1;
  d.num_tensors = 1;
  int64_t shape[] = {1, 784};
  d.tensors[0] = ferry::shm::MakeTensorRef(0, 0, 784 * 4, ferry::DType::kF32, shape);
  return d;
}
constexpr size_t kTypicalBytes =
    offsetof(DescriptorData, tensors) + sizeof(ferry::shm::TensorRefData);

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

void Pin(int cpu) {
  if (std::thread::hardware_concurrency() < 2) {
    return;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

void SpinFor(int64_t ns) {
  int64_t until = NowNs() + ns;
  while (NowNs() < until) {
  }
}

int Warmup(int count) { return std::max(100, count / 10); }

// Reads every byte: the consumer's work on a tensor it was handed.
uint64_t Checksum(const uint8_t* bytes, size_t n) {
  uint64_t sum = 0;
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes + 8 * i, 8);
    sum += w;
  }
  for (size_t i = words * 8; i < n; ++i) {
    sum += bytes[i];
  }
  return sum;
}

struct Stats {
  double p50 = 0, p99 = 0, max = 0;
};

Stats Summarise(std::vector<int64_t> samples) {
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return static_cast<double>(samples[static_cast<size_t>(q * (samples.size() - 1))]);
  };
  return {at(0.5), at(0.99), static_cast<double>(samples.back())};
}

// A fresh segment per measurement (the supervisor's view), removed afterwards.
struct Node {
  std::string name;
  Segment segment;
  explicit Node(uint64_t total_bytes)
      : name("ferry-bench-" + std::to_string(getpid())),
        segment(Segment::Create(name, {1, 1, 1024, total_bytes}).value()) {}
  ~Node() { Segment::Remove(name); }
  // The consumer records samples into its own partition (int64 nanoseconds); the parent
  // reads them after it exits.
  std::vector<int64_t> Samples(int count) const {
    const auto* p = reinterpret_cast<const int64_t*>(segment.partition(kWorker).data());
    return {p, p + count};
  }
};

int64_t* OwnSamples(const Segment& view) {
  return reinterpret_cast<int64_t*>(view.partition(kWorker).data());
}

int WaitChild(pid_t child) {
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// --- Hand-off of one descriptor ---

Stats RingHandoff(int count, bool sleepy, int64_t gap_ns) {
  Node node(64 << 20);
  uint32_t sub = node.segment.SubmissionRing(0, 0);
  uint32_t ack = node.segment.CompletionRing(0, 0);
  int total = count + Warmup(count);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    Segment view = Segment::Attach(node.name, kWorker).value();
    ferry::shm::RingConsumer in(view, sub);
    ferry::shm::RingProducer out(view, ack);
    int64_t* samples = OwnSamples(view);
    DescriptorData d{};
    for (int i = 0; i < total; ++i) {
      while (in.TryPop(&d) != RingStatus::kOk) {
        if (sleepy) {  // The production setting: spin 2000 checks, then sleep.
          ferry::shm::WaitForWork(
              view, kWorker, [&] { return in.HasWork(); }, 1'000'000'000);
        }
      }
      int64_t now = NowNs();
      if (i >= total - count) {
        samples[i - (total - count)] = now - d.deadline_ns;
      }
      while (out.TryPush(d) != RingStatus::kOk) {
      }
    }
    _exit(0);
  }
  Pin(0);
  Segment view = Segment::Attach(node.name, kHookhost).value();
  ferry::shm::RingProducer out(view, sub);
  ferry::shm::RingConsumer in(view, ack);
  DescriptorData d = Typical();
  for (int i = 0; i < total; ++i) {
    SpinFor(gap_ns);
    d.sequence = static_cast<uint64_t>(i);
    d.deadline_ns = NowNs();
    while (out.TryPush(d) != RingStatus::kOk) {
    }
    DescriptorData ack_d{};
    while (in.TryPop(&ack_d) != RingStatus::kOk) {
    }
  }
  WaitChild(child);
  return Summarise(node.Samples(count));
}

// Reads exactly n bytes; polling (MSG_DONTWAIT, never sleeping) or blocking.
bool ReadAll(int fd, void* buffer, size_t n, bool poll) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, static_cast<char*>(buffer) + got, n - got, poll ? MSG_DONTWAIT : 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      return false;
    }
  }
  return true;
}

bool WriteAll(int fd, const void* buffer, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    ssize_t w = write(fd, static_cast<const char*>(buffer) + sent, n - sent);
    if (w <= 0) {
      return false;
    }
    sent += static_cast<size_t>(w);
  }
  return true;
}

Stats SocketHandoff(int count, bool poll, int64_t gap_ns) {
  Node node(64 << 20);  // Only for the samples.
  int fds[2], back[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  socketpair(AF_UNIX, SOCK_STREAM, 0, back);
  int total = count + Warmup(count);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    Segment view = Segment::Attach(node.name, kWorker).value();
    int64_t* samples = OwnSamples(view);
    DescriptorData d{};
    for (int i = 0; i < total; ++i) {
      if (!ReadAll(fds[1], &d, kTypicalBytes, poll)) {
        _exit(1);
      }
      int64_t now = NowNs();
      if (i >= total - count) {
        samples[i - (total - count)] = now - d.deadline_ns;
      }
      char ack = 1;
      if (!WriteAll(back[1], &ack, 1)) {
        _exit(1);
      }
    }
    _exit(0);
  }
  Pin(0);
  DescriptorData d = Typical();
  for (int i = 0; i < total; ++i) {
    SpinFor(gap_ns);
    d.deadline_ns = NowNs();
    char ack = 0;
    if (!WriteAll(fds[0], &d, kTypicalBytes) || !ReadAll(back[0], &ack, 1, poll)) {
      break;
    }
  }
  WaitChild(child);
  for (int fd : {fds[0], fds[1], back[0], back[1]}) {
    close(fd);
  }
  return Summarise(node.Samples(count));
}

// --- Throughput of descriptors ---

double RingThroughput(int count) {
  Node node(64 << 20);
  uint32_t sub = node.segment.SubmissionRing(0, 0);
  int total = count + Warmup(count);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    Segment view = Segment::Attach(node.name, kWorker).value();
    ferry::shm::RingConsumer in(view, sub);
    DescriptorData d{};
    uint64_t sum = 0;
    for (int i = 0; i < total;) {
      if (in.TryPop(&d) == RingStatus::kOk) {
        sum += d.sequence;  // The descriptor is read, as a worker would.
        ++i;
      }
    }
    _exit(sum == 0 ? 1 : 0);
  }
  Pin(0);
  Segment view = Segment::Attach(node.name, kHookhost).value();
  ferry::shm::RingProducer out(view, sub);
  DescriptorData d = Typical();
  int64_t start = 0;
  for (int i = 0; i < total;) {
    if (i == total - count && start == 0) {
      start = NowNs();
    }
    d.sequence = static_cast<uint64_t>(i) + 1;
    if (out.TryPush(d) == RingStatus::kOk) {
      ++i;
    }
  }
  WaitChild(child);
  return count / (static_cast<double>(NowNs() - start) / 1e9);
}

// The writer batches 64 descriptors per write; the reader reads up to 64 per read.
double SocketThroughput(int count) {
  constexpr int kBatch = 64;
  int fds[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  int total = (count + Warmup(count)) / kBatch * kBatch;
  count = count / kBatch * kBatch;
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    close(fds[0]);
    std::vector<DescriptorData> buffer(kBatch);
    std::vector<char> bytes(kTypicalBytes * kBatch);
    size_t want = static_cast<size_t>(total) * kTypicalBytes;
    size_t total_read = 0;
    uint64_t sum = 0;
    while (total_read < want) {
      ssize_t n = read(fds[1], bytes.data(), bytes.size());
      if (n <= 0) {
        _exit(1);
      }
      total_read += static_cast<size_t>(n);
      sum += static_cast<uint8_t>(bytes[0]);  // The bytes are read.
    }
    _exit(sum == 12345 ? 1 : 0);
  }
  Pin(0);
  close(fds[1]);
  std::vector<char> batch(kTypicalBytes * kBatch);
  DescriptorData d = Typical();
  for (int k = 0; k < kBatch; ++k) {
    std::memcpy(batch.data() + k * kTypicalBytes, &d, kTypicalBytes);
  }
  int64_t start = 0;
  for (int i = 0; i < total; i += kBatch) {
    if (i >= total - count && start == 0) {
      start = NowNs();
    }
    if (!WriteAll(fds[0], batch.data(), batch.size())) {
      break;
    }
  }
  WaitChild(child);
  close(fds[0]);
  return count / (static_cast<double>(NowNs() - start) / 1e9);
}

// --- Payload: the tensor written, handed over, read in full ---

Stats RingPayload(size_t bytes, int count) {
  Node node(64 << 20);
  uint32_t sub = node.segment.SubmissionRing(0, 0);
  uint32_t ack = node.segment.CompletionRing(0, 0);
  int total = count + Warmup(count);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    Segment view = Segment::Attach(node.name, kWorker).value();
    ferry::shm::RingConsumer in(view, sub);
    ferry::shm::RingProducer out(view, ack);
    int64_t* samples = OwnSamples(view);
    ferry::shm::DescriptorRules rules{kHookhost, 1, {kHookhost}, view.partition_bytes()};
    DescriptorData d{};
    for (int i = 0; i < total; ++i) {
      while (in.TryPop(&d) != RingStatus::kOk) {
      }
      if (!ferry::shm::ValidateDescriptor(d, rules).ok()) {
        _exit(1);
      }
      std::span<uint8_t> tensor = ferry::shm::TensorBytes(view, d.tensors[0]);  // In place.
      d.sequence = Checksum(tensor.data(), tensor.size());
      int64_t now = NowNs();
      if (i >= total - count) {
        samples[i - (total - count)] = now - d.deadline_ns;
      }
      while (out.TryPush(d) != RingStatus::kOk) {
      }
    }
    _exit(0);
  }
  Pin(0);
  Segment view = Segment::Attach(node.name, kHookhost).value();
  ferry::shm::Arena arena(view, kHookhost);
  ferry::shm::RingProducer out(view, sub);
  ferry::shm::RingConsumer in(view, ack);
  std::vector<uint8_t> source(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    source[i] = static_cast<uint8_t>(i * 7);
  }
  uint64_t expected = Checksum(source.data(), bytes);
  int bad = 0;
  for (int i = 0; i < total; ++i) {
    ferry::shm::Block block = arena.Allocate(bytes).value();
    DescriptorData d{};
    d.kind = static_cast<uint16_t>(ferry::shm::DescriptorKind::kSubmit);
    d.rows = 1;
    d.num_tensors = 1;
    int64_t shape[] = {static_cast<int64_t>(bytes)};
    d.tensors[0] =
        ferry::shm::MakeTensorRef(kHookhost, block.offset, bytes, ferry::DType::kU8, shape);
    d.deadline_ns = NowNs();
    std::memcpy(arena.Bytes(block).data(), source.data(), bytes);  // The one copy.
    while (out.TryPush(d) != RingStatus::kOk) {
    }
    while (in.TryPop(&d) != RingStatus::kOk) {
    }
    bad += d.sequence != expected;
    (void)arena.Free(block.offset);
  }
  WaitChild(child);
  if (bad != 0) {
    std::cerr << "ring payload: " << bad << " wrong checksums\n";
    std::exit(1);
  }
  return Summarise(node.Samples(count));
}

// The same bytes over a Unix socket: an 8-byte header (the send time) and the payload in one
// write; the reader polls, reads it into its buffer in as few reads as the kernel allows, and
// checksums it there.
Stats SocketPayload(size_t bytes, int count) {
  Node node(64 << 20);
  int fds[2], back[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  socketpair(AF_UNIX, SOCK_STREAM, 0, back);
  // Socket buffers large enough for a whole message in flight, as a tuned server sets them.
  int buffer_bytes = static_cast<int>(std::min<size_t>(bytes * 2 + 4096, 4 << 20));
  for (int fd : {fds[0], fds[1]}) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  int total = count + Warmup(count);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    Segment view = Segment::Attach(node.name, kWorker).value();
    int64_t* samples = OwnSamples(view);
    std::vector<uint8_t> message(8 + bytes);
    for (int i = 0; i < total; ++i) {
      if (!ReadAll(fds[1], message.data(), message.size(), true)) {
        _exit(1);
      }
      uint64_t sum = Checksum(message.data() + 8, bytes);
      int64_t now = NowNs();
      int64_t sent = 0;
      std::memcpy(&sent, message.data(), 8);
      if (i >= total - count) {
        samples[i - (total - count)] = now - sent;
      }
      if (!WriteAll(back[1], &sum, 8)) {
        _exit(1);
      }
    }
    _exit(0);
  }
  Pin(0);
  std::vector<uint8_t> message(8 + bytes);
  for (size_t i = 0; i < bytes; ++i) {
    message[8 + i] = static_cast<uint8_t>(i * 7);
  }
  uint64_t expected = Checksum(message.data() + 8, bytes);
  int bad = 0;
  for (int i = 0; i < total; ++i) {
    int64_t now = NowNs();
    std::memcpy(message.data(), &now, 8);
    uint64_t sum = 0;
    if (!WriteAll(fds[0], message.data(), message.size()) || !ReadAll(back[0], &sum, 8, true)) {
      break;
    }
    bad += sum != expected;
  }
  WaitChild(child);
  for (int fd : {fds[0], fds[1], back[0], back[1]}) {
    close(fd);
  }
  if (bad != 0) {
    std::cerr << "socket payload: " << bad << " wrong checksums\n";
    std::exit(1);
  }
  return Summarise(node.Samples(count));
}

nlohmann::json StatsJson(const Stats& s) {
  return {{"p50_ns", s.p50}, {"p99_ns", s.p99}, {"max_ns", s.max}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-shm-bench: shared-memory rings against a Unix socket, same bytes"};
  bool json = false;
  bool check = false;
  int count = 20000;
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--check", check, "exit 1 when a ratio misses its target");
  app.add_option("--count", count, "hand-offs per measurement")->check(CLI::Range(100, 1000000));
  CLI11_PARSE(app, argc, argv);

  int slow = std::max(100, count / 10);
  constexpr int64_t kSleepGapNs = 300'000;  // Longer than the 2000-spin window: it sleeps.
  Stats ring_spin = RingHandoff(count, false, 0);
  Stats socket_poll = SocketHandoff(count, true, 0);
  Stats ring_sleep = RingHandoff(slow, true, kSleepGapNs);
  Stats socket_block = SocketHandoff(slow, false, kSleepGapNs);
  double ring_rate = RingThroughput(count * 50);
  double socket_rate = SocketThroughput(count * 10);
  struct PayloadRow {
    const char* label;
    size_t bytes;
    Stats ring, socket;
  };
  std::vector<PayloadRow> payloads = {
      {"4KiB", 4 << 10, {}, {}}, {"64KiB", 64 << 10, {}, {}}, {"1MiB", 1 << 20, {}, {}}};
  for (PayloadRow& row : payloads) {
    int n = row.bytes >= (1 << 20) ? std::max(100, count / 20) : std::max(100, count / 4);
    row.ring = RingPayload(row.bytes, n);
    row.socket = SocketPayload(row.bytes, n);
  }

  // Targets: each a ratio measured in this run (docs/benchmarks.md).
  nlohmann::json targets = nlohmann::json::array();
  bool pass = true;
  auto target = [&](const std::string& what, double ratio, double bound, bool at_most) {
    bool ok = at_most ? ratio <= bound : ratio >= bound;
    pass = pass && ok;
    targets.push_back(
        {{"what", what}, {"ratio", ratio}, {"bound", bound}, {"at_most", at_most}, {"met", ok}});
  };
  target("spinning hand-off p50, ring / polling socket", ring_spin.p50 / socket_poll.p50, 0.5,
         true);
  target("sleeping hand-off p50, ring / blocking socket", ring_sleep.p50 / socket_block.p50, 1.25,
         true);
  // Reported, not targets: five runs on the 2-vCPU development VM did not all agree
  // (docs/benchmarks.md), so no claim is made for them.
  nlohmann::json reported = nlohmann::json::array();
  auto report = [&](const std::string& what, double ratio) {
    reported.push_back({{"what", what}, {"ratio", ratio}});
  };
  report("descriptor throughput, ring / batched socket", ring_rate / socket_rate);
  for (const PayloadRow& row : payloads) {
    std::string what = std::string(row.label) + " tensor read in full p50, ring / socket";
    double ratio = row.ring.p50 / row.socket.p50;
    if (row.bytes == (4 << 10)) {
      target(what, ratio, 0.9, true);
    } else {
      report(what, ratio);
    }
  }

  nlohmann::json out = {
      {"handoff",
       {{"ring_spin", StatsJson(ring_spin)},
        {"socket_poll", StatsJson(socket_poll)},
        {"ring_sleep", StatsJson(ring_sleep)},
        {"socket_block", StatsJson(socket_block)}}},
      {"throughput_per_s", {{"ring", ring_rate}, {"socket_batched", socket_rate}}},
      {"targets", targets},
      {"reported", reported},
      {"targets_met", pass}};
  for (const PayloadRow& row : payloads) {
    out["payload"][row.label] = {{"ring", StatsJson(row.ring)}, {"socket", StatsJson(row.socket)}};
  }
  if (json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("%-30s %10s %10s %12s\n", "hand-off (152 B descriptor)", "p50 ns", "p99 ns",
                "max ns");
    for (auto [label, s] : {std::pair{"ring, spinning", ring_spin},
                            {"socket, polling", socket_poll},
                            {"ring, asleep (production)", ring_sleep},
                            {"socket, blocking read", socket_block}}) {
      std::printf("%-30s %10.0f %10.0f %12.0f\n", label, s.p50, s.p99, s.max);
    }
    std::printf("\nthroughput: ring %.2f M/s, socket (64 per write/read) %.2f M/s\n",
                ring_rate / 1e6, socket_rate / 1e6);
    std::printf("\n%-8s %14s %14s %10s %10s\n", "tensor", "ring p50 ns", "socket p50 ns",
                "ring GB/s", "sock GB/s");
    for (const PayloadRow& row : payloads) {
      std::printf("%-8s %14.0f %14.0f %10.2f %10.2f\n", row.label, row.ring.p50, row.socket.p50,
                  static_cast<double>(row.bytes) / row.ring.p50,
                  static_cast<double>(row.bytes) / row.socket.p50);
    }
    std::printf("\nreported (no target):\n");
    for (const auto& r : reported) {
      std::printf("       %-55s %.3f\n", r["what"].get<std::string>().c_str(),
                  r["ratio"].get<double>());
    }
    std::printf("\ntargets:\n");
    for (const auto& t : targets) {
      std::printf("  %-4s %-55s %.3f (%s %.2f)\n", t["met"].get<bool>() ? "ok" : "MISS",
                  t["what"].get<std::string>().c_str(), t["ratio"].get<double>(),
                  t["at_most"].get<bool>() ? "<=" : ">=", t["bound"].get<double>());
    }
  }
  return check && !pass ? 1 : 0;
}
