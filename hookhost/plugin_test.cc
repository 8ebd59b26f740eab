// Loading hook plugins: the ABI version is checked, files that are not plugins are refused
// with their path, and a plugin's results are checked rather than trusted.
#include "hookhost/plugin.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace ferry::hookhost {
namespace {

std::string PluginPath(const std::string& name) {
  return std::string(FERRY_TEST_PLUGIN_DIR) + "/" + name + ".so";
}

TEST_CASE("a plugin is loaded through its checked descriptor; its table is read") {
  Result<std::shared_ptr<Plugin>> plugin = Plugin::Open(PluginPath("escape"));
  REQUIRE(plugin.ok());
  CHECK(std::string((*plugin)->table().name) == "escape");
  Result<std::unique_ptr<PluginInstance>> instance = PluginInstance::Create(*plugin, "nothing");
  REQUIRE(instance.ok());
  CHECK((*instance)->preserves_rows());
  CHECK((*instance)->has_preprocess());
  CHECK_FALSE((*instance)->has_postprocess());
}

TEST_CASE("a plugin built for another ABI version is refused, naming both versions") {
  Result<std::shared_ptr<Plugin>> plugin = Plugin::Open(PluginPath("old_abi"));
  REQUIRE_FALSE(plugin.ok());
  CHECK(plugin.error().code == ErrorCode::kInvalidArgument);
  CHECK(plugin.error().message.find("old_abi.so") != std::string::npos);
  CHECK(plugin.error().message.find("ABI version 4 (through ferry_plugin_entry_v2), this "
                                    "ferry-hookhost speaks versions 1 to 3") != std::string::npos);
}

TEST_CASE("a plugin built for ABI version 1 still loads: no run, hooks as before") {
  Result<std::shared_ptr<Plugin>> plugin = Plugin::Open(PluginPath("v1"));
  REQUIRE_MESSAGE(plugin.ok(), (plugin.ok() ? "" : plugin.error().message));
  CHECK((*plugin)->version() == 1);
  Result<std::unique_ptr<PluginInstance>> instance = PluginInstance::Create(*plugin, "");
  REQUIRE(instance.ok());
  CHECK_FALSE((*instance)->has_run());
  CHECK_FALSE((*instance)->has_preprocess());
}

TEST_CASE("files that are not plugins are refused with their path, never loaded or waited on") {
  testing::TempDir dir;
  Result<std::shared_ptr<Plugin>> no_entry = Plugin::Open(PluginPath("no_entry"));
  REQUIRE_FALSE(no_entry.ok());
  CHECK(no_entry.error().message.find("no ferry_plugin_entry_v2 symbol") != std::string::npos);

  std::string text = dir.path() + "/text.so";
  std::ofstream(text) << "not an ELF file\n";
  Result<std::shared_ptr<Plugin>> not_elf = Plugin::Open(text);
  REQUIRE_FALSE(not_elf.ok());
  CHECK(not_elf.error().message.find("text.so: not loadable") != std::string::npos);

  std::string fifo = dir.path() + "/fifo.so";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  Result<std::shared_ptr<Plugin>> from_fifo = Plugin::Open(fifo);  // Must not block.
  REQUIRE_FALSE(from_fifo.ok());
  CHECK(from_fifo.error().message.find("fifo.so") != std::string::npos);

  std::string link = dir.path() + "/link.so";
  REQUIRE(symlink(PluginPath("escape").c_str(), link.c_str()) == 0);
  Result<std::shared_ptr<Plugin>> through_link = Plugin::Open(link);
  REQUIRE_FALSE(through_link.ok());
  CHECK(through_link.error().message.find("link.so") != std::string::npos);

  Result<std::shared_ptr<Plugin>> missing = Plugin::Open(dir.path() + "/missing.so");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ErrorCode::kNotFound);
}

TEST_CASE("two plugins loaded at once are two objects, each with its own table") {
  // Loading goes through /proc/self/fd/N; dlopen knows objects by name, so a descriptor
  // number reused while the first plugin is loaded would hand back the first object.
  Result<std::shared_ptr<Plugin>> escape = Plugin::Open(PluginPath("escape"));
  REQUIRE(escape.ok());
  Result<std::shared_ptr<Plugin>> no_entry = Plugin::Open(PluginPath("no_entry"));
  REQUIRE_FALSE(no_entry.ok());
  CHECK(no_entry.error().message.find("no ferry_plugin_entry_v2 symbol") != std::string::npos);
  Result<std::shared_ptr<Plugin>> again = Plugin::Open(PluginPath("escape"));
  REQUIRE(again.ok());
  CHECK(std::string((*again)->table().name) == "escape");
}

TEST_CASE("a plugin's error is read within its buffer and its code checked") {
  ferry_error error{};
  std::memset(error.message, 'x', sizeof(error.message));  // Not NUL-terminated.
  error.code = 99;                                         // Not a code.
  Error e = PluginError("p", 99, error);
  CHECK(e.code == ErrorCode::kInternal);
  CHECK(e.message == "p: " + std::string(FERRY_ERROR_MESSAGE_BYTES, 'x'));
  ferry_error invalid{};
  invalid.code = FERRY_ERR_INVALID_ARGUMENT;
  std::strcpy(invalid.message, "bad image");
  CHECK(PluginError("p", FERRY_ERR_INVALID_ARGUMENT, invalid).code == ErrorCode::kInvalidArgument);
  CHECK(PluginError("p", FERRY_ERR_INVALID_ARGUMENT, invalid).message == "p: bad image");
  ferry_error empty{};
  Error from_return = PluginError("p", FERRY_ERR_RESOURCE_EXHAUSTED, empty);
  CHECK(from_return.code == ErrorCode::kResourceExhausted);
  CHECK(from_return.message == "p: failed with code 3");
}

// A pipeline probe's run with a stand-in for the host's model calls: what the plugin asked
// for, and what it answered.
struct ProbeRun {
  // What each call asked for, copied (the plugin's strings go when it is unloaded).
  struct Seen {
    std::string model;
    std::string input;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Seen> seen;
  Status status;
  std::vector<AllocatedTensor> out;
  std::vector<std::vector<uint8_t>> buffers;
  int call_count = 0;

  std::vector<std::vector<float>> sent;  // A decoupled run's responses (their "logits").
  int refuse_after = -1;                 // Sends answered CANCELLED from this one on.

  explicit ProbeRun(const std::string& action, bool decoupled = false, int refuse = -1,
                    const std::string& file = "pipeline_probe")
      : refuse_after(refuse) {
    std::shared_ptr<Plugin> plugin = Plugin::Open(PluginPath(file)).value();
    std::unique_ptr<PluginInstance> instance = PluginInstance::Create(plugin, action).value();
    REQUIRE(instance->has_run());
    std::vector<float> x(2 * 784, 0.5f), f(2 * 64, 0.25f);
    std::vector<TensorView> inputs{
        {"x", DType::kF32, {2, 784}, {reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4}},
        {"f", DType::kF32, {2, 64}, {reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4}}};
    std::vector<std::string> names{"logits", "probs"};
    buffers.resize(2);
    OutputAllocator allocate = [this](uint32_t index, DType dtype, const Shape& shape) {
      buffers[index].assign(TensorByteSize(dtype, shape).value(), 0);
      return std::optional<AllocatedTensor>(AllocatedTensor{dtype, shape, buffers[index], index});
    };
    // Model m answers one FP32 [2, 10] output filled with m's call number.
    ModelCaller caller =
        [this](std::span<const ModelCall> calls) -> Result<std::vector<std::vector<OwnedTensor>>> {
      ++call_count;
      std::vector<std::vector<OwnedTensor>> results;
      for (const ModelCall& call : calls) {
        const TensorView& in = call.inputs.at(0);
        seen.push_back(
            {call.model, std::string(in.name), in.shape, {in.bytes.begin(), in.bytes.end()}});
        std::vector<float> values(20, static_cast<float>(seen.size()));
        std::vector<uint8_t> bytes(80);
        std::memcpy(bytes.data(), values.data(), 80);
        results.push_back({{"out", DType::kF32, {2, 10}, bytes}});
      }
      return results;
    };
    ResponseSender send = [this](std::span<const TensorView> tensors) -> Status {
      if (refuse_after >= 0 && static_cast<int>(sent.size()) >= refuse_after) {
        return Cancelled("the client left");
      }
      const TensorView& t = tensors[0];
      std::vector<float> values(t.bytes.size() / 4);
      std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
      sent.push_back(values);
      return OkStatus();
    };
    status = instance->Run(inputs, decoupled ? std::vector<std::string>() : names, allocate, caller,
                           decoupled ? &send : nullptr, &out);
  }
};

TEST_CASE("a decoupled run's responses reach the host in order, checked; a refusal stops it") {
  ProbeRun three("send3", true);
  REQUIRE_MESSAGE(three.status.ok(), (three.status.ok() ? "" : three.status.error().message));
  REQUIRE(three.sent.size() == 3);
  CHECK(three.sent[0] == std::vector<float>(10, 0.0f));
  CHECK(three.sent[2] == std::vector<float>(10, 2.0f));
  // The client gone after the first: the plugin sees CANCELLED and stops.
  ProbeRun cancelled("send3", true, 1);
  REQUIRE_FALSE(cancelled.status.ok());
  CHECK(cancelled.status.error().code == ErrorCode::kCancelled);
  CHECK(cancelled.sent.size() == 1);
  // Hostile sends are refused before the host acts on them.
  for (const char* action : {"send_lying", "send_null"}) {
    CAPTURE(action);
    ProbeRun run(action, true);
    REQUIRE_FALSE(run.status.ok());
    CHECK(run.status.error().code == ErrorCode::kInvalidArgument);
    CHECK(run.status.error().message.find("host->send") != std::string::npos);
    CHECK(run.sent.empty());
  }
  // A run that is not decoupled has no send.
  ProbeRun plain("send3", false);
  REQUIRE_FALSE(plain.status.ok());
  CHECK(plain.status.error().message.find("NULL") != std::string::npos);
}

TEST_CASE("a version 2 pipeline plugin still loads and runs; it cannot be decoupled") {
  std::shared_ptr<Plugin> v2 = Plugin::Open(PluginPath("pipeline_probe_v2")).value();
  CHECK(v2->version() == 2);
  std::unique_ptr<PluginInstance> instance = PluginInstance::Create(v2, "parallel").value();
  CHECK(instance->has_run());
  CHECK_FALSE(instance->decoupled_capable());
  CHECK(PluginInstance::Create(Plugin::Open(PluginPath("pipeline_probe")).value(), "parallel")
            .value()
            ->decoupled_capable());
  ProbeRun run("parallel", false, -1, "pipeline_probe_v2");
  REQUIRE_MESSAGE(run.status.ok(), (run.status.ok() ? "" : run.status.error().message));
  CHECK(run.call_count == 1);
}

TEST_CASE("a pipeline's model calls reach the host checked, and their outputs reach the plugin") {
  for (const char* action : {"parallel", "sequential"}) {
    CAPTURE(action);
    ProbeRun run(action);
    REQUIRE_MESSAGE(run.status.ok(), (run.status.ok() ? "" : run.status.error().message));
    CHECK(run.call_count == (std::string(action) == "parallel" ? 1 : 2));
    REQUIRE(run.seen.size() == 2);
    CHECK(run.seen[0].model == "mlp");
    CHECK(run.seen[0].input == "input");
    CHECK(run.seen[0].shape == Shape{2, 784});
    CHECK(run.seen[0].bytes.size() == 2 * 784 * 4);
    float x0;
    std::memcpy(&x0, run.seen[0].bytes.data(), 4);
    CHECK(x0 == 0.5f);
    CHECK(run.seen[1].model == "cnn_head");
    CHECK(run.seen[1].input == "features");
    CHECK(run.seen[1].shape == Shape{2, 64});
    float first, second;
    std::memcpy(&first, run.buffers[0].data(), 4);
    std::memcpy(&second, run.buffers[1].data(), 4);
    CHECK(first == 1.0f);  // Each call's outputs, still readable when the run answered.
    CHECK(second == 2.0f);
  }
}

TEST_CASE("malformed model calls are refused before the host acts on them; the run fails") {
  for (const char* action : {"null_calls", "too_many", "zero", "null_model", "long_model",
                             "lying_bytes", "null_data", "bad_dtype", "too_many_inputs"}) {
    CAPTURE(action);
    ProbeRun run(action);
    REQUIRE_FALSE(run.status.ok());
    CHECK(run.status.error().code == ErrorCode::kInvalidArgument);
    CHECK(run.status.error().message.find("host->call") != std::string::npos);
    CHECK(run.call_count == 0);
  }
}

TEST_CASE("a model call's error reaches the plugin with its code, and the client through it") {
  std::shared_ptr<Plugin> plugin = Plugin::Open(PluginPath("pipeline_probe")).value();
  std::unique_ptr<PluginInstance> instance = PluginInstance::Create(plugin, "parallel").value();
  std::vector<float> x(784), f(64);
  std::vector<TensorView> inputs{
      {"x", DType::kF32, {1, 784}, {reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4}},
      {"f", DType::kF32, {1, 64}, {reinterpret_cast<const uint8_t*>(f.data()), f.size() * 4}}};
  std::vector<std::string> names{"logits", "probs"};
  std::vector<AllocatedTensor> out;
  Status s = instance->Run(
      inputs, names, [](uint32_t, DType, const Shape&) { return std::nullopt; },
      [](std::span<const ModelCall>) -> Result<std::vector<std::vector<OwnedTensor>>> {
        return Unavailable("model 'mlp': no worker serves it");
      },
      nullptr, &out);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == ErrorCode::kUnavailable);
  CHECK(s.error().message.find("no worker serves it") != std::string::npos);
}

}  // namespace
}  // namespace ferry::hookhost
