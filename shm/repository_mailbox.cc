#include "shm/repository_mailbox.h"

#include <algorithm>
#include <cstring>

#include "config/scheduler_config.h"

namespace ferry::shm {

namespace {

constexpr uint32_t kCodeOk = 0;  // Else the ErrorCode + 1.

}  // namespace

void PostRepositoryRequest(RepositoryMailboxData& box, uint32_t sequence, RepositoryOp op,
                           const std::string& model, int64_t max_batch_size) {
  size_t n = std::min(model.size(), sizeof(box.model) - 1);
  std::memcpy(box.model, model.data(), n);
  box.model[n] = '\0';
  box.max_batch_size = max_batch_size;
  box.request.store(uint64_t{sequence} << 8 | static_cast<uint8_t>(op), std::memory_order_release);
}

std::optional<RepositoryAnswer> ReadRepositoryAnswer(const RepositoryMailboxData& box,
                                                     uint32_t sequence) {
  uint64_t word = box.answer.load(std::memory_order_acquire);
  if (word >> 16 != sequence) {
    return std::nullopt;
  }
  RepositoryAnswer answer;
  answer.refreshes = ((word >> 8) & kRepositoryRefreshes) != 0;
  auto code = static_cast<uint32_t>(word & 0xff);
  if (code == kCodeOk) {
    return answer;
  }
  char text[sizeof(box.message)];
  std::memcpy(text, box.message, sizeof(text));
  text[sizeof(text) - 1] = '\0';
  if (box.answer.load(std::memory_order_acquire) != word) {
    return std::nullopt;  // Rewritten while copied (a late answer to another request): again.
  }
  ErrorCode error = code - 1 <= static_cast<uint32_t>(kLastErrorCode)
                        ? static_cast<ErrorCode>(code - 1)
                        : ErrorCode::kInternal;
  answer.status = Error{error, text};
  return answer;
}

std::optional<Result<RepositoryRequest>> TakeRepositoryRequest(const RepositoryMailboxData& box,
                                                               uint64_t* seen, uint32_t* sequence) {
  uint64_t word = box.request.load(std::memory_order_acquire);
  if (word == 0 || word == *seen) {
    return std::nullopt;
  }
  *seen = word;
  *sequence = static_cast<uint32_t>(word >> 8);
  char name[sizeof(box.model)];
  std::memcpy(name, box.model, sizeof(name));  // A copy: the hook host may write on.
  int64_t cap = box.max_batch_size;
  auto op = static_cast<uint8_t>(word & 0xff);
  if (word >> 40 != 0 || *sequence == 0) {
    *sequence = 0;
    return Result<RepositoryRequest>(InvalidArgument("a repository request word out of range"));
  }
  if (op != static_cast<uint8_t>(RepositoryOp::kLoad) &&
      op != static_cast<uint8_t>(RepositoryOp::kUnload)) {
    return Result<RepositoryRequest>(
        InvalidArgument("unknown repository operation " + std::to_string(op)));
  }
  const char* end = static_cast<const char*>(std::memchr(name, '\0', sizeof(name)));
  std::string model(name, end == nullptr ? 0 : static_cast<size_t>(end - name));
  if (end == nullptr || !IsValidModelName(model)) {
    return Result<RepositoryRequest>(
        InvalidArgument("not a model name (letters, digits, '_', '-', '.'; at most 128 bytes)"));
  }
  if (cap < 0 || cap > kMaxLoadBatchCap ||
      (cap != 0 && op != static_cast<uint8_t>(RepositoryOp::kLoad))) {
    return Result<RepositoryRequest>(InvalidArgument("a batch cap of " + std::to_string(cap) +
                                                     " (a load's, 1.." +
                                                     std::to_string(kMaxLoadBatchCap) + ")"));
  }
  return Result<RepositoryRequest>(
      RepositoryRequest{*sequence, static_cast<RepositoryOp>(op), std::move(model), cap});
}

void PostRepositoryAnswer(RepositoryMailboxData& box, uint32_t sequence, const Status& status,
                          uint8_t flags) {
  uint32_t code = kCodeOk;
  std::string text;
  if (!status.ok()) {
    code = static_cast<uint32_t>(status.error().code) + 1;
    text = status.error().message;
  }
  size_t n = std::min(text.size(), sizeof(box.message) - 1);
  std::memcpy(box.message, text.data(), n);
  box.message[n] = '\0';
  box.answer.store(uint64_t{sequence} << 16 | uint64_t{flags} << 8 | code,
                   std::memory_order_release);
}

}  // namespace ferry::shm
