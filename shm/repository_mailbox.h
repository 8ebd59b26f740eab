// One hook host's mailbox for the repository extension's load and unload: a client asks a
// hook host, which cannot open bundles inside its sandbox, and ferryd (which can, and owns the
// model table) carries the change out and answers. Lives in the hook host's own object
// (FrontEndCountersData::repository), which only that hook host and ferryd map.
//
// Protocol: the hook host writes the model's name, then `request` = sequence << 8 | op
// (release); ferryd takes a request whose word differs from the last it took (acquire),
// copies and checks the name, and later writes `message`, then `answer` = sequence << 16 |
// flags << 8 | code (release). The hook host waits for an answer carrying its sequence.
//
// Trust: ferryd treats everything here as hostile (a hook host runs third-party plugins): a
// name without its NUL, an unknown op, or a sequence reused are refused or ignored, never
// read past the array. The hook host treats the answer's message as text to pass on.
// Thread safety: one request at a time per mailbox (the hook host's RepositoryControl
// serialises them); ferryd is the only writer of `answer` and `message`.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "common/result.h"

namespace ferry::shm {

enum class RepositoryOp : uint8_t { kLoad = 1, kUnload = 2 };

struct RepositoryMailboxData {
  std::atomic<uint64_t> request;  // sequence << 8 | op; 0: none yet.
  char model[136];                // NUL-terminated.
  int64_t max_batch_size;         // A load's config override: the batch cap (0: none).
  std::atomic<uint64_t> answer;   // sequence << 16 | flags << 8 | code; 0: none yet.
  char message[512];              // NUL-terminated.
};

// An answer's flags: ferryd drains the asking hook host right after answering (the model
// table changed; it restarts with the new one).
inline constexpr uint8_t kRepositoryRefreshes = 1;

struct RepositoryRequest {
  uint32_t sequence = 0;
  RepositoryOp op = RepositoryOp::kLoad;
  std::string model;
  int64_t max_batch_size = 0;  // A load's cap on batch rows (0: none), 1..kMaxLoadBatchCap.
};

inline constexpr int64_t kMaxLoadBatchCap = 1 << 20;

struct RepositoryAnswer {
  Status status;  // OK, or what went wrong.
  bool refreshes = false;
};

// Hook host: posts request `sequence` (nonzero). REQUIRES: no request of this mailbox is
// unanswered; model.size() < sizeof(model); 0 <= max_batch_size <= kMaxLoadBatchCap.
void PostRepositoryRequest(RepositoryMailboxData& box, uint32_t sequence, RepositoryOp op,
                           const std::string& model, int64_t max_batch_size = 0);
// Hook host: the answer to `sequence`, once ferryd has written it.
std::optional<RepositoryAnswer> ReadRepositoryAnswer(const RepositoryMailboxData& box,
                                                     uint32_t sequence);

// ferryd: a request not taken before (its word differs from `*seen`, which is updated), or
// nullopt. An error names what is wrong with a request that is not one (the caller answers
// it with the error, under the sequence in `*sequence` when nonzero).
std::optional<Result<RepositoryRequest>> TakeRepositoryRequest(const RepositoryMailboxData& box,
                                                               uint64_t* seen, uint32_t* sequence);
// ferryd: answers `sequence`.
void PostRepositoryAnswer(RepositoryMailboxData& box, uint32_t sequence, const Status& status,
                          uint8_t flags);

}  // namespace ferry::shm
