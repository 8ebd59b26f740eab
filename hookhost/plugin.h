// Hook plugins (include/ferry/plugin.h): opening a shared object, checking its ABI, and calling
// it without trusting it. Pipeline plugins (ABI version 2) also call back into the host: every
// ferry_call they hand over is checked before it is used.
//
// A Plugin is one dlopen'ed object; a PluginInstance is its state for one model (create() with
// the manifest's config). Calls translate ferry tensors to the C ABI and back; everything the
// plugin returns is checked: its error code (an unknown one is INTERNAL), its message (read
// within the buffer, whatever it wrote), every output the host expects allocated exactly once.
//
// Lifetimes: a PluginInstance keeps its Plugin loaded. Objects are never unloaded while any
// instance lives.
// Thread safety: Open and Create run in the load sandbox (sandbox.h), on one thread.
// Preprocess and Postprocess may run concurrently (the ABI tells plugins so).
#pragma once

#include <ferry/plugin.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/dtype.h"
#include "model/manifest.h"

namespace ferry::hookhost {

// One dlopen'ed plugin object.
class Plugin {
 public:
  // Opens `path` (a regular file, opened without following a final symlink, then loaded
  // through its descriptor so the checked file is the one loaded) and checks its table.
  // INVALID_ARGUMENT naming the path: not a regular file, not a shared object, no entry
  // symbol, another ABI version, a table too small, no create().
  static Result<std::shared_ptr<Plugin>> Open(const std::string& path);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const ferry_plugin& table() const { return *table_; }
  const std::string& path() const { return path_; }
  // 1, 2 or 3: the ABI the plugin was built for (a version 1 table has no run(); version 3
  // may send decoupled responses).
  uint32_t version() const { return version_; }

 private:
  Plugin(void* handle, int fd, const ferry_plugin* table, uint32_t version, std::string path)
      : handle_(handle), fd_(fd), table_(table), version_(version), path_(std::move(path)) {}
  void* handle_;
  int fd_;  // The file it was loaded through, open while it is loaded.
  const ferry_plugin* table_;
  uint32_t version_;
  std::string path_;
};

// A tensor handed to a plugin: its bytes stay where they are (the arena, or a completion).
struct TensorView {
  std::string_view name;
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const uint8_t> bytes;
};

// A buffer the host gave a plugin for one of its outputs.
struct AllocatedTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::span<uint8_t> bytes;
  uint64_t block = 0;  // What the allocator returned as its handle (an arena offset).
};

// Gives out output buffers. Returns nullopt when it cannot (the plugin sees NULL).
using OutputAllocator =
    std::function<std::optional<AllocatedTensor>(uint32_t index, DType dtype, const Shape& shape)>;

// A tensor with its own bytes: a model call's output, a response's tensor.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;
};

// One model call a pipeline asked for, checked: names within bounds, dtypes and ranks valid,
// each tensor's bytes the size its dtype and shape say (its data pointer is the plugin's).
struct ModelCall {
  std::string model;
  std::vector<TensorView> inputs;
};

// Sends one response of a decoupled pipeline (checked as a ModelCall's inputs are; the
// data is the plugin's, valid during the call). CANCELLED once the client is gone.
using ResponseSender = std::function<Status(std::span<const TensorView>)>;

// Runs model calls at once; returns each call's outputs (in its manifest's order), or the
// error of one that failed. Runs on the plugin's thread, blocking.
using ModelCaller =
    std::function<Result<std::vector<std::vector<OwnedTensor>>>(std::span<const ModelCall>)>;

class PluginInstance {
 public:
  // Calls create(config) (a NULL state is allowed). The plugin's error on failure.
  static Result<std::unique_ptr<PluginInstance>> Create(std::shared_ptr<Plugin> plugin,
                                                        const std::string& config);
  ~PluginInstance();
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  bool preserves_rows() const {
    return (plugin_->table().flags & FERRY_PLUGIN_PRESERVES_ROWS) != 0;
  }
  bool has_preprocess() const { return plugin_->table().preprocess != nullptr; }
  bool has_postprocess() const { return plugin_->table().postprocess != nullptr; }
  bool has_run() const { return plugin_->version() >= 2 && plugin_->table().run != nullptr; }
  const std::string& path() const { return plugin_->path(); }

  // Runs preprocess / postprocess. `names` are the outputs expected, in order; on success
  // `*out` holds one AllocatedTensor per name. On failure every buffer already given out is
  // listed in `*out` too, for the caller to free. REQUIRES: has_preprocess() / has_postprocess().
  Status Preprocess(std::span<const TensorView> inputs, std::span<const std::string> names,
                    const OutputAllocator& allocate, std::vector<AllocatedTensor>* out) const;
  Status Postprocess(std::span<const TensorView> inputs, std::span<const std::string> names,
                     const OutputAllocator& allocate, std::vector<AllocatedTensor>* out) const;
  // Runs a pipeline's run(), its host->call() served by `call` (a malformed ferry_call is
  // refused INVALID_ARGUMENT to the plugin, never read past its bounds). Outputs as above.
  // A decoupled pipeline's run() gets host->send served by `send` (nullptr: none, the plugin
  // sees NULL) and `names` empty. REQUIRES: has_run(); `send` only when decoupled().
  Status Run(std::span<const TensorView> inputs, std::span<const std::string> names,
             const OutputAllocator& allocate, const ModelCaller& call, const ResponseSender* send,
             std::vector<AllocatedTensor>* out) const;
  bool decoupled_capable() const { return plugin_->version() >= 3; }

 private:
  PluginInstance(std::shared_ptr<Plugin> plugin, void* state)
      : plugin_(std::move(plugin)), state_(state) {}
  // Calls the plugin: (state, tensors, count, outputs, error) -> code.
  using Entry =
      std::function<int32_t(void*, const ferry_tensor*, uint32_t, ferry_outputs*, ferry_error*)>;
  Status Call(const Entry& entry, std::string_view what, std::span<const TensorView> inputs,
              std::span<const std::string> names, const OutputAllocator& allocate,
              std::vector<AllocatedTensor>* out) const;

  std::shared_ptr<Plugin> plugin_;
  void* state_;
};

// A plugin's error as a ferry Error: the code checked (unknown -> INTERNAL), the message read
// within its buffer, prefixed with `who`.
Error PluginError(std::string_view who, int32_t returned, const ferry_error& error);

}  // namespace ferry::hookhost
