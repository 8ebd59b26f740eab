// A node for multi-process tests: this process is the supervisor (it creates the segment and
// starts ferry-worker with fork + exec, as ferryd does) and drives hook-host slots with
// NodeDriver. The repository holds the example models and a broken bundle.
//
// Thread safety: one test thread.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/node_driver.h"
#include "tests/testing/shm_name.h"
#include "tests/testing/temp_dir.h"

namespace ferry::testing {

// Model indices: the repository's models in name order.
inline constexpr uint32_t kBroken =
    0;  // "broken": a bundle that fails to load (test repositories).
inline constexpr uint32_t kCnn = 1;
inline constexpr uint32_t kMlp = 2;

inline std::string Repository(const TempDir& dir) {
  // The two example models, and a broken bundle that must not stop the others.
  std::string repo = dir / "models";
  std::filesystem::create_directories(repo);
  for (const char* model : {"cnn", "mlp"}) {
    // Copied: a bundle linked from outside the repository is refused (model/repository.h).
    std::filesystem::copy(std::filesystem::current_path() / "examples/models" / model,
                          repo + "/" + model, std::filesystem::copy_options::recursive);
  }
  WriteFile(repo + "/broken/manifest.toml", "name = \"broken\"\n[[inputs]]\n");
  return repo;
}

inline std::string NodeFile(const TempDir& dir, const std::string& extra) {
  std::string path = dir / "node.toml";
  WriteFile(path, "[node]\nname = \"t\"\ndevices = \"cpu:1\"\nmodel_repository = \"" +
                      Repository(dir) + "\"\n" + extra);
  return path;
}

struct Node {
  std::string name = UniqueShmName("worker");
  shm::Segment segment;
  pid_t worker = -1;
  uint32_t worker_slot;

  Node(const std::string& config, uint32_t hookhosts = 2)
      : segment(shm::Segment::Create(name, {hookhosts, 1, 256, 96 << 20}).value()),
        worker_slot(segment.WorkerSlot(0)) {
    worker = StartWorker(FERRY_WORKER_BINARY, name, worker_slot, config);
  }
  ~Node() {
    if (worker > 0) {
      kill(worker, SIGKILL);
      waitpid(worker, nullptr, 0);
    }
    shm::Segment::Remove(name);
  }
  int Stop() {
    int code = StopWorker(segment, worker_slot, worker);
    worker = -1;
    return code;
  }
  shm::StatusSnapshotData Status() const { return shm::ReadStatus(segment, worker_slot).value(); }
  // The status once `pred` holds for it (snapshots are published every few milliseconds), or
  // the last one read after ten seconds (a sanitizer build on two loaded CPUs can stall a
  // worker for far longer than a publish period; a held predicate returns at once).
  template <typename Pred>
  shm::StatusSnapshotData StatusWhen(Pred pred) const {
    shm::StatusSnapshotData s = Status();
    for (int i = 0; i < 2000 && !pred(s); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      s = Status();
    }
    return s;
  }
};

// Two F32 tensors equal to float rounding (batches of other sizes run other GEMM blockings).
inline bool SameFloats(std::span<const uint8_t> got, std::span<const uint8_t> want) {
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i + 4 <= want.size(); i += 4) {
    float a, b;
    std::memcpy(&a, got.data() + i, 4);
    std::memcpy(&b, want.data() + i, 4);
    same = std::fabs(a - b) <= 1e-5f * std::max(1.0f, std::fabs(b));
  }
  return same;
}

inline std::vector<uint8_t> RandomFloats(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1, 1);
  std::vector<uint8_t> bytes(count * 4);
  for (size_t i = 0; i < count; ++i) {
    float f = value(rng);
    std::memcpy(bytes.data() + 4 * i, &f, 4);
  }
  return bytes;
}

// Runs until `done()` or the timeout, collecting completions.
template <typename Done>
void PollUntil(NodeDriver& driver, std::vector<Completion>* out, Done done, int timeout_s = 60) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    driver.Poll(out);
    driver.Wait(1'000'000);
  }
  driver.Poll(out);
}

}  // namespace ferry::testing
