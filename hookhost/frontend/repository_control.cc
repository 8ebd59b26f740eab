#include "hookhost/frontend/repository_control.h"

#include <chrono>

#include "common/clock.h"

namespace ferry::frontend {

namespace {

constexpr auto kAnswerPoll = std::chrono::milliseconds(5);

}  // namespace

RepositoryControl::RepositoryControl(shm::RepositoryMailboxData& box,
                                     std::function<bool()> drain_settled, int64_t wait_ns)
    : box_(box),
      drain_settled_(std::move(drain_settled)),
      wait_ns_(wait_ns),
      sequence_(static_cast<uint32_t>(box.request.load(std::memory_order_relaxed) >> 8)),
      thread_([this] { Run(); }) {}

RepositoryControl::~RepositoryControl() { Cancel(); }

void RepositoryControl::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  std::optional<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(job_);
  }
  if (left) {
    left->done(Unavailable("this hook host stopped before the repository change was answered"));
  }
}

bool RepositoryControl::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return job_.has_value();
}

void RepositoryControl::Submit(shm::RepositoryOp op, std::string model, int64_t max_batch_size,
                               Done done) {
  bool stopped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped = stop_;
    if (!job_ && !stop_) {
      job_ = Job{op, std::move(model), max_batch_size, std::move(done)};
      wake_.notify_all();
      return;
    }
  }
  done(Unavailable(stopped ? "this hook host is stopping; retry on another"
                           : "another repository change asked of this hook host is in progress; "
                             "retry"));
}

void RepositoryControl::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || job_.has_value(); });
    if (stop_) {
      return;
    }
    Job job = *job_;  // Left in job_, so a second Submit is refused while this one waits.
    lock.unlock();
    Status status = Carry(job);
    lock.lock();
    if (stop_ && !status.ok() && status.error().code == ErrorCode::kCancelled) {
      return;  // The destructor answers it.
    }
    job_.reset();
    lock.unlock();
    job.done(status);
    lock.lock();
  }
}

Status RepositoryControl::Carry(const Job& job) {
  uint32_t sequence = ++sequence_;
  if (sequence == 0 || sequence >= (uint32_t{1} << 31)) {
    sequence = sequence_ = 1;
  }
  shm::PostRepositoryRequest(box_, sequence, job.op, job.model, job.max_batch_size);
  int64_t deadline = MonotonicNs() + wait_ns_;
  while (true) {
    if (std::optional<shm::RepositoryAnswer> answer = shm::ReadRepositoryAnswer(box_, sequence)) {
      if (answer->refreshes) {
        for (int waited = 0; !drain_settled_() && waited < kDrainWaitMs; ++waited) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      return answer->status;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) {
        return Error{ErrorCode::kCancelled, "stopping"};
      }
    }
    if (MonotonicNs() > deadline) {
      return Unavailable("ferryd did not answer the repository change in " +
                         std::to_string(wait_ns_ / 1'000'000'000) + " s");
    }
    std::this_thread::sleep_for(kAnswerPoll);
  }
}

}  // namespace ferry::frontend
