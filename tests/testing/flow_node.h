// What the hook host's flow tests share: a node of CPU worker processes that the test
// supervises, a HookHost run in process on hook host slot 0, requests by model name, and
// CpuBackend run directly as the reference.
//
// Thread safety: as HookHost (hookhost.h); the node and its processes belong to one test.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "hookhost/frontend/kserve_service.h"
#include "hookhost/hookhost.h"
#include "net/compression.h"
#include "shm/recovery.h"
#include "tests/testing/hookhost_test.h"
#include "tests/testing/worker_node.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"

namespace ferry::hookhost {

using testing::Get;

using testing::kBroken;
using testing::kCnn;
using testing::kMlp;
using testing::RandomFloats;
using testing::SameFloats;

// A node of `workers` CPU workers (each pinned to nothing, one thread) and 2 hook host slots.
struct FlowNode {
  testing::TempDir dir;
  std::string name = testing::UniqueShmName("flow");
  std::string config;
  shm::Segment segment;
  std::vector<pid_t> pids;

  // `node_keys` go into [node] (backend = "sim"), `extra` after it.
  explicit FlowNode(uint32_t workers, const std::string& extra = "",
                    const std::string& node_keys = "")
      : config(testing::NodeFile(dir, "[cpu]\nthreads = 1\npin = false\n" + extra)),
        segment(shm::Segment::Create(name, {2, workers, 256, 64 << 20}).value()) {
    // NodeFile wrote the repository and devices = "cpu:1"; this node has `workers`.
    std::string text = "[node]\nname = \"t\"\ndevices = \"cpu:" + std::to_string(workers) +
                       "\"\nmodel_repository = \"" + dir / "models" + "\"\n" + node_keys +
                       "[cpu]\nthreads = 1\npin = false\n" + extra;
    testing::WriteFile(config, text);
    for (uint32_t w = 0; w < workers; ++w) {
      pids.push_back(
          testing::StartWorker(FERRY_WORKER_BINARY, name, segment.WorkerSlot(w), config));
    }
    for (uint32_t w = 0; w < workers; ++w) {
      REQUIRE(testing::WaitReady(segment, segment.WorkerSlot(w), pids[w], 120));
    }
  }
  ~FlowNode() {
    for (pid_t pid : pids) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    shm::Segment::Remove(name);
  }
  std::string repository() const { return dir / "models"; }
  uint64_t Served(uint32_t worker, uint32_t model) const {
    return shm::ReadStatus(segment, segment.WorkerSlot(worker))
        .value()
        .models[model]
        .requests_served;
  }
};

// A hook host on slot 0 of `node`, as ferry-hookhost runs it (its own view of the segment).
struct Host {
  shm::Segment view;
  std::vector<HookModel> models;
  std::unique_ptr<HookHost> host;
  Host(const FlowNode& node, GatewayMode mode, int threads = 2, int64_t spin_ns = 0,
       int64_t stale_status_ns = 100'000'000, int64_t stall_ns = 1'000'000'000)
      : view(shm::Segment::Attach(node.name, 0).value()),
        models(LoadHookModels(node.repository()).value()) {
    HookHostOptions options;
    options.gateway = mode;
    options.threads = threads;
    options.spin_ns = spin_ns;
    options.stale_status_ns = stale_status_ns;
    options.stall_ns = stall_ns;
    host = std::make_unique<HookHost>(view, 0, models, options);
    host->Start();
  }
};

// Every block came back once the releases drained: this hook host's arena is empty, and so is
// worker 0's (every output block was released).
inline void CheckArenasEmpty(const FlowNode& node, const Host& host) {
  for (int i = 0; i < 2000 && host.view.accounting(0).bytes_in_use.load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(host.view.accounting(0).bytes_in_use.load() == 0);
  uint32_t worker = node.segment.WorkerSlot(0);
  for (int i = 0; i < 2000 && node.segment.accounting(worker).bytes_in_use.load() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(node.segment.accounting(worker).bytes_in_use.load() == 0);
}

inline InferRequest Request(const HookHost& host, std::string_view model, const Shape& shape,
                            const std::vector<uint8_t>& bytes, const std::string& input) {
  InferRequest r;
  r.model = host.Find(model);
  r.inputs.push_back({input, DType::kF32, shape, bytes});
  return r;
}

// CpuBackend run directly on `rows` rows of `model`.
struct Direct {
  std::vector<RepositoryModel> repo;
  CpuBackend backend{CpuOptions{CpuMode::kFast, 1}};
  std::vector<ModelHandle> handles;
  explicit Direct(const std::string& dir) : repo(LoadRepository(dir).value()) {
    for (const RepositoryModel& m : repo) {
      handles.push_back(m.bundle ? backend.Load(*m.bundle).value() : ModelHandle{});
    }
  }
  // In chunks of at most the largest compiled size, each run at the smallest size holding it.
  std::vector<uint8_t> Run(uint32_t model, int64_t rows, const std::vector<uint8_t>& input,
                           size_t out_floats_per_row) {
    const std::vector<int64_t>& sizes = repo[model].bundle->manifest.batch_sizes;
    size_t in_row = input.size() / static_cast<size_t>(rows);
    size_t out_row = out_floats_per_row * 4;
    std::vector<uint8_t> out;
    for (int64_t first = 0; first < rows; first += sizes.back()) {
      int64_t n = std::min(rows - first, sizes.back());
      int64_t size = *std::lower_bound(sizes.begin(), sizes.end(), n);
      std::vector<uint8_t> chunk(static_cast<size_t>(n) * out_row);
      std::span<const uint8_t> in(input.data() + static_cast<size_t>(first) * in_row,
                                  static_cast<size_t>(n) * in_row);
      BatchJob job{0, size, {{n, {in}, {chunk}}}};
      REQUIRE(backend.Execute(handles[model], job).ok());
      out.insert(out.end(), chunk.begin(), chunk.end());
    }
    return out;
  }
};

}  // namespace ferry::hookhost
