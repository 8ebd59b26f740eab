// ferry-shm-bench [--json]: cross-process hand-off through ferry's shared-memory rings against
// a Unix domain socket pair and a pipe carrying the same bytes (a one-tensor descriptor:
// 152 bytes), in one run.
//   handoff:     one-way latency of one descriptor (p50/p99/max): spinning consumer, futex
//                wake-up (consumer asleep each time), Unix socket, pipe.
//   throughput:  descriptors per second with producer and consumer both busy.
//   payload:     a 1 MiB tensor handed over (one write into the arena + a descriptor; the
//                consumer reads it in place) against plain memcpy bandwidth.
// The two processes are pinned to different CPUs when the machine has two or more.
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
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

// The child records one-way latencies into its own partition, as int64 nanoseconds.
int64_t* Samples(const ferry::shm::Segment& segment) {
  return reinterpret_cast<int64_t*>(segment.partition(segment.WorkerSlot(0)).data());
}

void SpinFor(int64_t ns) {
  int64_t until = NowNs() + ns;
  while (NowNs() < until) {
  }
}

// Ring hand-off: parent produces on the submission ring, child acks on the completion ring.
Stats RingHandoff(const ferry::shm::Segment& segment, int count, bool sleepy) {
  uint32_t sub = segment.SubmissionRing(0, 0);
  uint32_t ack = segment.CompletionRing(0, 0);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    ferry::shm::RingConsumer in(segment, sub);
    ferry::shm::RingProducer out(segment, ack);
    int64_t* samples = Samples(segment);
    DescriptorData d{};
    for (int i = 0; i < count; ++i) {
      while (in.TryPop(&d) != RingStatus::kOk) {
        if (sleepy) {
          ferry::shm::WaitForWork(
              segment, segment.WorkerSlot(0), [&] { return in.HasWork(); }, 1'000'000'000, 0);
        }
      }
      samples[i] = NowNs() - d.deadline_ns;
      while (out.TryPush(d) != RingStatus::kOk) {
      }
    }
    _exit(0);
  }
  Pin(0);
  ferry::shm::RingProducer out(segment, sub);
  ferry::shm::RingConsumer in(segment, ack);
  DescriptorData d = Typical();
  for (int i = 0; i < count; ++i) {
    if (sleepy) {
      SpinFor(30'000);  // Long enough for the consumer to fall asleep on its futex.
    }
    d.sequence = static_cast<uint64_t>(i);
    d.deadline_ns = NowNs();
    while (out.TryPush(d) != RingStatus::kOk) {
    }
    DescriptorData ack_d{};
    while (in.TryPop(&ack_d) != RingStatus::kOk) {
    }
  }
  waitpid(child, nullptr, 0);
  return Summarise(std::vector<int64_t>(Samples(segment), Samples(segment) + count));
}

// The same exchange over a pair of file descriptors (Unix socket pair or pipes).
Stats FdHandoff(const ferry::shm::Segment& segment, int count, int to_child[2], int to_parent[2]) {
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    int64_t* samples = Samples(segment);
    DescriptorData d{};
    for (int i = 0; i < count; ++i) {
      size_t got = 0;
      while (got < kTypicalBytes) {
        ssize_t n = read(to_child[0], reinterpret_cast<char*>(&d) + got, kTypicalBytes - got);
        if (n <= 0) {
          _exit(1);
        }
        got += static_cast<size_t>(n);
      }
      samples[i] = NowNs() - d.deadline_ns;
      char ack = 1;
      if (write(to_parent[1], &ack, 1) != 1) {
        _exit(1);
      }
    }
    _exit(0);
  }
  Pin(0);
  DescriptorData d = Typical();
  for (int i = 0; i < count; ++i) {
    SpinFor(30'000);
    d.deadline_ns = NowNs();
    if (write(to_child[1], &d, kTypicalBytes) != static_cast<ssize_t>(kTypicalBytes)) {
      break;
    }
    char ack = 0;
    if (read(to_parent[0], &ack, 1) != 1) {
      break;
    }
  }
  waitpid(child, nullptr, 0);
  return Summarise(std::vector<int64_t>(Samples(segment), Samples(segment) + count));
}

double RingThroughput(const ferry::shm::Segment& segment, int count) {
  uint32_t sub = segment.SubmissionRing(0, 0);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    ferry::shm::RingConsumer in(segment, sub);
    DescriptorData d{};
    for (int i = 0; i < count;) {
      if (in.TryPop(&d) == RingStatus::kOk) {
        ++i;
      }
    }
    _exit(0);
  }
  Pin(0);
  ferry::shm::RingProducer out(segment, sub);
  DescriptorData d = Typical();
  int64_t start = NowNs();
  for (int i = 0; i < count;) {
    if (out.TryPush(d) == RingStatus::kOk) {
      ++i;
    }
  }
  waitpid(child, nullptr, 0);
  return count / (static_cast<double>(NowNs() - start) / 1e9);
}

double SocketThroughput(int count) {
  int fds[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    close(fds[0]);
    std::vector<char> buffer(kTypicalBytes * 64);
    size_t total = 0;
    size_t want = static_cast<size_t>(count) * kTypicalBytes;
    while (total < want) {
      ssize_t n = read(fds[1], buffer.data(), buffer.size());
      if (n <= 0) {
        _exit(1);
      }
      total += static_cast<size_t>(n);
    }
    _exit(0);
  }
  Pin(0);
  close(fds[1]);
  DescriptorData d = Typical();
  int64_t start = NowNs();
  for (int i = 0; i < count; ++i) {
    if (write(fds[0], &d, kTypicalBytes) != static_cast<ssize_t>(kTypicalBytes)) {
      break;
    }
  }
  waitpid(child, nullptr, 0);
  close(fds[0]);
  return count / (static_cast<double>(NowNs() - start) / 1e9);
}

// 1 MiB: write into an arena block, push the descriptor; the consumer takes the bytes in
// place. Returns GB/s over (write start -> consumer holds the tensor), median of `count`.
double ArenaPayload(const ferry::shm::Segment& segment, int count) {
  constexpr uint64_t kBytes = 1 << 20;
  uint32_t sub = segment.SubmissionRing(0, 0);
  uint32_t ack = segment.CompletionRing(0, 0);
  pid_t child = fork();
  if (child == 0) {
    Pin(1);
    ferry::shm::RingConsumer in(segment, sub);
    ferry::shm::RingProducer out(segment, ack);
    int64_t* samples = Samples(segment);
    ferry::shm::DescriptorRules rules{0, 1, {0}, segment.partition_bytes()};
    DescriptorData d{};
    for (int i = 0; i < count; ++i) {
      while (in.TryPop(&d) != RingStatus::kOk) {
      }
      if (!ferry::shm::ValidateDescriptor(d, rules).ok()) {
        _exit(1);
      }
      std::span<uint8_t> tensor = ferry::shm::TensorBytes(segment, d.tensors[0]);  // In place.
      samples[i] = NowNs() - d.deadline_ns + (tensor.back() & 0);
      while (out.TryPush(d) != RingStatus::kOk) {
      }
    }
    _exit(0);
  }
  Pin(0);
  ferry::shm::Arena arena(segment, 0);
  ferry::shm::RingProducer out(segment, sub);
  ferry::shm::RingConsumer in(segment, ack);
  std::vector<uint8_t> source(kBytes, 0x5a);
  for (int i = 0; i < count; ++i) {
    ferry::shm::Block block = arena.Allocate(kBytes).value();
    DescriptorData d{};
    d.kind = static_cast<uint16_t>(ferry::shm::DescriptorKind::kSubmit);
    d.rows = 1;
    d.num_tensors = 1;
    int64_t shape[] = {static_cast<int64_t>(kBytes)};
    d.tensors[0] = ferry::shm::MakeTensorRef(0, block.offset, kBytes, ferry::DType::kU8, shape);
    d.deadline_ns = NowNs();
    std::memcpy(arena.Bytes(block).data(), source.data(), kBytes);  // The one copy.
    while (out.TryPush(d) != RingStatus::kOk) {
    }
    while (in.TryPop(&d) != RingStatus::kOk) {
    }
    (void)arena.Free(block.offset);
  }
  waitpid(child, nullptr, 0);
  Stats s = Summarise(std::vector<int64_t>(Samples(segment), Samples(segment) + count));
  return kBytes / s.p50;  // bytes per ns = GB/s.
}

double MemcpyBandwidth(int count) {
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> a(kBytes, 1), b(kBytes, 2);
  std::vector<int64_t> samples;
  for (int i = 0; i < count; ++i) {
    int64_t start = NowNs();
    std::memcpy(b.data(), a.data(), kBytes);
    samples.push_back(NowNs() - start);
    a[static_cast<size_t>(i) % kBytes] = b[0];
  }
  return kBytes / Summarise(samples).p50;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-shm-bench: shared-memory rings against sockets and pipes"};
  bool json = false;
  int count = 20000;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--count", count, "hand-offs per measurement")->check(CLI::Range(100, 1000000));
  CLI11_PARSE(app, argc, argv);

  std::string name = "ferry-bench-" + std::to_string(getpid());
  ferry::Result<ferry::shm::Segment> created =
      ferry::shm::Segment::Create(name, {1, 1, 1024, 64 << 20});
  if (!created.ok()) {
    std::cerr << created.error().message << "\n";
    return 1;
  }
  ferry::shm::Segment& segment = *created;
  auto reset = [&] {  // Fresh rings between measurements.
    for (uint32_t r = 0; r < segment.num_rings(); ++r) {
      segment.ring(r).head.store(0);
      segment.ring(r).tail.store(0);
    }
  };
  int slow = std::max(100, count / 4);
  Stats spin = RingHandoff(segment, count, false);
  reset();
  Stats futex = RingHandoff(segment, slow, true);
  reset();
  int sockets[2], back[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sockets);
  socketpair(AF_UNIX, SOCK_STREAM, 0, back);
  int to_child[2] = {sockets[1], sockets[0]};
  int to_parent[2] = {back[1], back[0]};
  Stats unix_socket = FdHandoff(segment, slow, to_child, to_parent);
  int p1[2], p2[2];
  if (pipe(p1) != 0 || pipe(p2) != 0) {
    return 1;
  }
  Stats pipes = FdHandoff(segment, slow, p1, p2);
  double ring_rate = RingThroughput(segment, count * 50);
  reset();
  double socket_rate = SocketThroughput(count * 10);
  double arena_gbps = ArenaPayload(segment, std::max(100, count / 20));
  reset();
  double memcpy_gbps = MemcpyBandwidth(std::max(100, count / 20));
  ferry::shm::Segment::Remove(name);

  auto stats = [](const Stats& s) {
    return nlohmann::json{{"p50_ns", s.p50}, {"p99_ns", s.p99}, {"max_ns", s.max}};
  };
  nlohmann::json out = {
      {"handoff",
       {{"spin", stats(spin)},
        {"futex", stats(futex)},
        {"unix_socket", stats(unix_socket)},
        {"pipe", stats(pipes)}}},
      {"throughput_per_s", {{"ring", ring_rate}, {"unix_socket", socket_rate}}},
      {"payload_1mib", {{"arena_gb_per_s", arena_gbps}, {"memcpy_gb_per_s", memcpy_gbps}}}};
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-12s %10s %10s %12s\n", "hand-off", "p50 ns", "p99 ns", "max ns");
  for (auto [label, s] :
       {std::pair{"spin", spin}, {"futex", futex}, {"unix socket", unix_socket}, {"pipe", pipes}}) {
    std::printf("%-12s %10.0f %10.0f %12.0f\n", label, s.p50, s.p99, s.max);
  }
  std::printf("\nthroughput: ring %.0f/s, unix socket %.0f/s (ratio %.1fx)\n", ring_rate,
              socket_rate, ring_rate / socket_rate);
  std::printf("1 MiB tensor: arena write + hand-off %.2f GB/s, memcpy %.2f GB/s (ratio %.2f)\n",
              arena_gbps, memcpy_gbps, arena_gbps / memcpy_gbps);
  return 0;
}
