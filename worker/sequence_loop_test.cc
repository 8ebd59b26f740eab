// Sequences through a real dispatch loop: a stateful model (an accumulator, y = relu(x +
// state), the state becoming x + state) on the CPU backend over a real segment, the test
// thread as the hook host.
#include <doctest/doctest.h>

#include <cstring>
#include <thread>

#include "model/bundle.h"
#include "tests/testing/node_driver.h"
#include "tests/testing/shm_name.h"
#include "tests/testing/temp_dir.h"
#include "worker/backends/cpu/cpu_backend.h"
#include "worker/backends/repository.h"
#include "worker/dispatch_loop.h"

namespace ferry::worker {
namespace {

using testing::Completion;
using testing::NodeDriver;

// The example accumulator (y = relu(x + state), the state becoming x + state) with these
// bounds.
std::string AccumulatorManifest(int max_sequences, int64_t idle_us) {
  std::string text = testing::ReadFile("examples/sequences/accumulator/manifest.toml");
  return text.substr(0, text.find("[sequence]")) +
         "[sequence]\nmax_sequences = " + std::to_string(max_sequences) +
         "\nmax_sequence_idle_us = " + std::to_string(idle_us) +
         "\n[[sequence.state]]\ninput = \"state_in\"\noutput = \"state_out\"\n";
}

struct Fixture {
  testing::TempDir dir;
  std::string name = testing::UniqueShmName("seq");
  shm::Segment segment = shm::Segment::Create(name, {1, 1, 64, 16 << 20}).value();
  std::vector<RepositoryModel> repo;
  CpuBackend backend{CpuOptions{CpuMode::kFast, 1}};
  std::optional<Scheduler> scheduler;
  std::unique_ptr<DispatchLoop> loop;
  std::thread thread;

  // `start`: run the loop now; else Start() does, after the test filled the rings.
  explicit Fixture(int max_sequences = 8, int64_t idle_us = 60'000'000, bool start = true) {
    std::filesystem::create_directories(dir / "models/accumulator");
    testing::WriteFile(dir / "models/accumulator/manifest.toml",
                       AccumulatorManifest(max_sequences, idle_us));
    testing::WriteFile(dir / "models/accumulator/weights.safetensors",
                       testing::SafetensorsBytes("{}", ""));
    repo = LoadRepository(dir / "models").value();
    std::vector<LoopModel> models;
    std::vector<ModelSpec> specs;
    for (const RepositoryModel& m : repo) {
      models.push_back({m.name, m.bundle.get(), backend.Load(*m.bundle).value(), std::nullopt});
      specs.push_back(SpecForModel(m));
    }
    scheduler.emplace(Scheduler::Create({}, std::move(specs)).value());
    DispatchLoopOptions options;
    options.status_interval_ns = 1'000'000;
    loop = std::make_unique<DispatchLoop>(segment, segment.WorkerSlot(0), &backend, &*scheduler,
                                          std::move(models), options);
    if (start) {
      Start();
    }
  }
  void Start() {
    thread = std::thread([this] { loop->Run(); });
  }
  ~Fixture() {
    testing::SendControl(segment, segment.WorkerSlot(0), {shm::ControlCode::kStop, 0, 0, 0});
    thread.join();
    shm::Segment::Remove(name);
  }
};

std::vector<uint8_t> Row(float v) {
  std::vector<uint8_t> bytes(16);
  float row[4] = {v, 2 * v, -v, 0};
  std::memcpy(bytes.data(), row, sizeof(row));
  return bytes;
}

// Submits one row of sequence `id`; returns the request's sequence number.
uint64_t Send(NodeDriver& driver, uint64_t id, uint8_t flags, float v, uint32_t tenant = 0,
              int64_t rows = 1, int64_t deadline_ns = 0) {
  std::vector<uint8_t> bytes;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> row = Row(v);
    bytes.insert(bytes.end(), row.begin(), row.end());
  }
  Result<uint64_t> sent = driver.Submit(0, 0, rows, {{DType::kF32, {rows, 4}, bytes}}, deadline_ns,
                                        0, 0, tenant, id, flags);
  REQUIRE(sent.ok());
  return *sent;
}

// Waits for `n` completions, in the order they arrive.
std::vector<Completion> Collect(NodeDriver& driver, size_t n) {
  std::vector<Completion> done;
  for (int i = 0; i < 10000 && done.size() < n; ++i) {
    driver.Wait(1'000'000);
    driver.Poll(&done);
  }
  REQUIRE(done.size() == n);
  return done;
}

// The first element of an answer's only output (y[0] = relu of the running sum's first).
float First(const Completion& c) {
  REQUIRE(c.status == 0);
  REQUIRE(c.outputs.size() == 1);  // The state output is never answered.
  float v;
  std::memcpy(&v, c.outputs[0].data(), sizeof(v));
  return v;
}

const Completion& Of(const std::vector<Completion>& done, uint64_t sequence) {
  for (const Completion& c : done) {
    if (c.sequence == sequence) {
      return c;
    }
  }
  FAIL("no completion for request " << sequence);
  return done.front();
}

TEST_CASE("five requests of a sequence sent at once each see the state the one before left") {
  Fixture f;
  NodeDriver driver(f.segment, 0);
  std::vector<uint64_t> sent;
  for (int k = 0; k < 5; ++k) {
    uint8_t flags = k == 0 ? shm::kSequenceStart : k == 4 ? shm::kSequenceEnd : 0;
    sent.push_back(Send(driver, 7, flags, 1.5f, 0));
  }
  std::vector<Completion> done = Collect(driver, 5);
  for (int k = 0; k < 5; ++k) {
    const Completion& c = Of(done, sent[static_cast<size_t>(k)]);
    CHECK(First(c) == doctest::Approx(1.5 * (k + 1)));
    CHECK(c.batch_size == 1);  // Never two requests of one sequence in one batch.
    CHECK(c.shapes[0] == Shape{1, 4});
  }
  // Ended: the id is not live any more until started anew.
  uint64_t late = Send(driver, 7, 0, 1.0f);
  std::vector<Completion> refused = Collect(driver, 1);
  CHECK(refused[0].sequence == late);
  CHECK(refused[0].code() == ErrorCode::kInvalidArgument);
  CHECK(refused[0].message.find("sequence 7 is not live") != std::string::npos);
  uint64_t again = Send(driver, 7, shm::kSequenceStart, 2.0f);
  CHECK(First(Of(Collect(driver, 1), again)) == doctest::Approx(2.0));
}

TEST_CASE("sequences batch together, one row each, and a tenant cannot reach another's") {
  Fixture f;
  NodeDriver driver(f.segment, 0);
  std::vector<uint64_t> a, b, c;
  for (int k = 0; k < 3; ++k) {
    uint8_t flags = k == 0 ? shm::kSequenceStart : 0;
    a.push_back(Send(driver, 1, flags, 1.0f, 1));
    b.push_back(Send(driver, 1, flags, 10.0f, 2));  // The same id under another tenant.
    c.push_back(Send(driver, 2, flags, 100.0f, 1));
  }
  std::vector<Completion> done = Collect(driver, 9);
  for (size_t k = 0; k < 3; ++k) {
    CHECK(First(Of(done, a[k])) == doctest::Approx(1.0 * (k + 1)));
    CHECK(First(Of(done, b[k])) == doctest::Approx(10.0 * (k + 1)));
    CHECK(First(Of(done, c[k])) == doctest::Approx(100.0 * (k + 1)));
  }
  // Tenant 3 never started sequence 1: refused, and tenant 1's state is untouched.
  uint64_t stranger = Send(driver, 1, 0, 5.0f, 3);
  CHECK(Collect(driver, 1)[0].code() == ErrorCode::kInvalidArgument);
  (void)stranger;
  uint64_t next = Send(driver, 1, 0, 1.0f, 1);
  CHECK(First(Of(Collect(driver, 1), next)) == doctest::Approx(4.0));
}

TEST_CASE("past max_sequences a start is refused until one ends or idles out") {
  Fixture f(2, 100'000);  // Two live at most; idle after 100 ms.
  NodeDriver driver(f.segment, 0);
  Send(driver, 1, shm::kSequenceStart, 1.0f);
  Send(driver, 2, shm::kSequenceStart, 1.0f);
  for (const Completion& c : Collect(driver, 2)) {
    CHECK(c.status == 0);
  }
  Send(driver, 3, shm::kSequenceStart, 1.0f);
  Completion full = Collect(driver, 1)[0];
  CHECK(full.code() == ErrorCode::kResourceExhausted);
  CHECK(full.message.find("max_sequences") != std::string::npos);
  // Sequence 1 ends: room for one more.
  Send(driver, 1, shm::kSequenceEnd, 1.0f);
  CHECK(Collect(driver, 1)[0].status == 0);
  Send(driver, 3, shm::kSequenceStart, 1.0f);
  CHECK(Collect(driver, 1)[0].status == 0);
  // Both idle past 100 ms: dropped, so a fresh start fits and the old ids are not live.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  Send(driver, 4, shm::kSequenceStart, 1.0f);
  Send(driver, 5, shm::kSequenceStart, 1.0f);
  for (const Completion& c : Collect(driver, 2)) {
    CHECK(c.status == 0);
  }
  Send(driver, 2, 0, 1.0f);
  Completion gone = Collect(driver, 1)[0];
  CHECK(gone.code() == ErrorCode::kInvalidArgument);
  CHECK(gone.message.find("idle past max_sequence_idle_us") != std::string::npos);
}

TEST_CASE("a stateful model refuses a request without a sequence, of two rows, or orphaned") {
  Fixture f;
  NodeDriver driver(f.segment, 0);
  Send(driver, 0, 0, 1.0f);
  Completion none = Collect(driver, 1)[0];
  CHECK(none.code() == ErrorCode::kInvalidArgument);
  CHECK(none.message.find("needs a sequence_id") != std::string::npos);
  Send(driver, 9, shm::kSequenceStart, 1.0f, 0, 2);
  Completion rows = Collect(driver, 1)[0];
  CHECK(rows.code() == ErrorCode::kInvalidArgument);
  CHECK(rows.message.find("one row") != std::string::npos);
  // A start and end, then one more without a start, sent at once: the third follows an end.
  Send(driver, 9, shm::kSequenceStart | shm::kSequenceEnd, 1.0f);
  uint64_t after = Send(driver, 9, 0, 1.0f);
  std::vector<Completion> done = Collect(driver, 2);
  const Completion& orphan = Of(done, after);
  CHECK(orphan.code() == ErrorCode::kInvalidArgument);
  CHECK(orphan.message.find("sequence_start") != std::string::npos);
  // A start while its sequence is live begins it again from zeros.
  Send(driver, 9, shm::kSequenceStart, 1.0f);
  CHECK(First(Collect(driver, 1)[0]) == doctest::Approx(1.0));
  Send(driver, 9, 0, 1.0f);
  CHECK(First(Collect(driver, 1)[0]) == doctest::Approx(2.0));
  Send(driver, 9, shm::kSequenceStart, 1.0f);
  CHECK(First(Collect(driver, 1)[0]) == doctest::Approx(1.0));
}

TEST_CASE("a sequence's current request and its successor cancelled in one drain: once each") {
  Fixture f(8, 60'000'000, false);  // The loop starts once the ring holds all of it.
  NodeDriver driver(f.segment, 0);
  uint64_t a = Send(driver, 3, shm::kSequenceStart, 1.0f);
  uint64_t b = Send(driver, 3, shm::kSequenceStart, 1.0f);  // Held behind a; starts anew.
  uint64_t c = Send(driver, 3, 0, 1.0f);                    // Held behind b.
  REQUIRE(driver.Cancel(0, a));                             // a leaves the queue: b's turn...
  REQUIRE(driver.Cancel(0, b));  // ...and b leaves before reaching the scheduler.
  f.Start();
  std::vector<Completion> done = Collect(driver, 3);
  CHECK(Of(done, a).code() == ErrorCode::kCancelled);
  CHECK(Of(done, b).code() == ErrorCode::kCancelled);
  CHECK(Of(done, c).message.find("did not run") != std::string::npos);  // It followed b.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  driver.Poll(&done);
  CHECK(done.size() == 3);  // Nobody answered twice.
  CHECK(driver.invalid_completions() == 0);
  uint64_t d = Send(driver, 3, shm::kSequenceStart, 2.0f);  // The sequence is not stuck busy.
  CHECK(First(Of(Collect(driver, 1), d)) == doctest::Approx(2.0));
}

TEST_CASE("a start or an end that never ran leaves the sequence as it was") {
  Fixture f;
  NodeDriver driver(f.segment, 0);
  Send(driver, 4, shm::kSequenceStart, 1.0f);
  CHECK(First(Collect(driver, 1)[0]) == doctest::Approx(1.0));
  // Deadlines long past: shed before execution.
  Send(driver, 4, shm::kSequenceStart, 1.0f, 0, 1, 1);
  CHECK(Collect(driver, 1)[0].code() == ErrorCode::kDeadlineExceeded);
  Send(driver, 4, shm::kSequenceEnd, 1.0f, 0, 1, 1);
  CHECK(Collect(driver, 1)[0].code() == ErrorCode::kDeadlineExceeded);
  Send(driver, 4, 0, 1.0f);  // Neither zeroed nor dropped it.
  CHECK(First(Collect(driver, 1)[0]) == doctest::Approx(2.0));
}

TEST_CASE("a start that did not run cuts off what followed it, and a new sequence is not live") {
  Fixture f(8, 60'000'000, false);
  NodeDriver driver(f.segment, 0);
  // A new sequence whose start is shed, a request following it, and one starting it anew.
  uint64_t start = Send(driver, 5, shm::kSequenceStart, 1.0f, 0, 1, 1);
  uint64_t follow = Send(driver, 5, 0, 1.0f);
  f.Start();
  std::vector<Completion> done = Collect(driver, 2);
  CHECK(Of(done, start).code() == ErrorCode::kDeadlineExceeded);
  const Completion& cut = Of(done, follow);
  CHECK(cut.code() == ErrorCode::kInvalidArgument);
  CHECK(cut.message.find("did not run") != std::string::npos);
  Send(driver, 5, 0, 1.0f);  // Nothing of it ran: it never became live.
  Completion gone = Collect(driver, 1)[0];
  CHECK(gone.code() == ErrorCode::kInvalidArgument);
  CHECK(gone.message.find("is not live") != std::string::npos);
}

TEST_CASE("a restart that did not run: the old state stays, but not for what followed it") {
  Fixture f(8, 60'000'000, false);  // All of it waits in the ring: each is held in turn.
  NodeDriver driver(f.segment, 0);
  uint64_t first = Send(driver, 6, shm::kSequenceStart, 1.0f);
  uint64_t restart = Send(driver, 6, shm::kSequenceStart, 1.0f, 0, 1, 1);  // Shed.
  uint64_t after = Send(driver, 6, 0, 1.0f);                               // Meant to follow it.
  uint64_t anew = Send(driver, 6, shm::kSequenceStart, 3.0f);
  uint64_t next = Send(driver, 6, 0, 1.0f);
  f.Start();
  std::vector<Completion> done = Collect(driver, 5);
  CHECK(First(Of(done, first)) == doctest::Approx(1.0));
  CHECK(Of(done, restart).status != 0);  // Refused or shed, by when it was seen.
  CHECK(Of(done, after).message.find("did not run") != std::string::npos);
  CHECK(First(Of(done, anew)) == doctest::Approx(3.0));
  CHECK(First(Of(done, next)) == doctest::Approx(4.0));
}

TEST_CASE("requests of different sequences share a batch, one row each") {
  Fixture f(8, 60'000'000, false);  // Four starts wait in the ring: one drain, one batch.
  NodeDriver driver(f.segment, 0);
  std::vector<uint64_t> sent;
  for (uint64_t id = 1; id <= 4; ++id) {
    sent.push_back(Send(driver, id, shm::kSequenceStart, static_cast<float>(id)));
  }
  f.Start();
  std::vector<Completion> done = Collect(driver, 4);
  for (uint64_t id = 1; id <= 4; ++id) {
    const Completion& c = Of(done, sent[id - 1]);
    CHECK(c.batch_size == 4);  // The compiled size 4, all four sequences in it.
    CHECK(First(c) == doctest::Approx(static_cast<double>(id)));
  }
}

}  // namespace
}  // namespace ferry::worker
