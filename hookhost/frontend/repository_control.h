// The repository extension's load and unload on a hook host (docs/frontend.md, "Repository"):
// a client's change is carried to ferryd through this hook host's mailbox
// (shm/repository_mailbox.h), which only ferryd acts on, and answered when ferryd answers:
// once the change is done (the model ready on a worker, or failed everywhere; every other
// hook host restarted with the new table) or has failed. When the answer says this hook host
// restarts next, the client hears it only once the front end's drain has settled: the
// answer's connection is closed (HTTP), every client was told to go away (gRPC GOAWAY) and
// idle connections are closed, so no request sent after the answer meets the old table.
//
// One change at a time per hook host: a second while one waits is UNAVAILABLE (ferryd takes
// one per node). The wait runs on a thread of this object's: it may last minutes (a large
// model loading), and neither the I/O thread nor the hook threads may be held that long.
//
// Thread safety: Submit from any thread. Lifetime: the mailbox outlives this.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/result.h"
#include "shm/repository_mailbox.h"

namespace ferry::frontend {

class RepositoryControl {
 public:
  using Done = std::function<void(const Status&)>;
  // `drain_settled` tells whether the front end's drain has settled (KServeService::
  // DrainSettled), waited for, for at most kDrainWaitMs, before an answer after which this
  // hook host restarts. `wait_ns`: how long ferryd may take to answer before the client is
  // told UNAVAILABLE.
  RepositoryControl(shm::RepositoryMailboxData& box, std::function<bool()> drain_settled,
                    int64_t wait_ns);
  // Cancel().
  ~RepositoryControl();
  RepositoryControl(const RepositoryControl&) = delete;
  RepositoryControl& operator=(const RepositoryControl&) = delete;

  // Asks ferryd for `op` on `model` (a load's batch cap: max_batch_size, 0 for none, as
  // RepositoryRequest takes it); `done` runs once, on this object's thread, or on the
  // caller's when refused at once (one change waits already).
  void Submit(shm::RepositoryOp op, std::string model, int64_t max_batch_size, Done done);

  // A change still waiting is answered UNAVAILABLE; later ones are refused; the thread is
  // joined. Idempotent. Before the servers stop: a gRPC call is finished only by its answer.
  void Cancel();
  // A change waits for ferryd's answer (a draining front end is not drained meanwhile).
  bool pending();

  static constexpr int kDrainWaitMs = 1000;

 private:
  struct Job {
    shm::RepositoryOp op;
    std::string model;
    int64_t max_batch_size;
    Done done;
  };
  void Run();
  Status Carry(const Job& job);

  shm::RepositoryMailboxData& box_;
  std::function<bool()> drain_settled_;
  int64_t wait_ns_;
  uint32_t sequence_;  // Of the last request; continues a predecessor's.
  std::mutex mu_;
  std::condition_variable wake_;
  std::optional<Job> job_;  // Guarded by mu_.
  bool stop_ = false;       // Guarded by mu_.
  std::thread thread_;
};

}  // namespace ferry::frontend
