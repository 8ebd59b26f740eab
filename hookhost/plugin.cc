#include "hookhost/plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>

#include "common/file.h"

namespace ferry::hookhost {

// The ABI's dtype and error values are ferry's own.
static_assert(FERRY_BOOL == static_cast<int>(DType::kBool));
static_assert(FERRY_U8 == static_cast<int>(DType::kU8));
static_assert(FERRY_I64 == static_cast<int>(DType::kI64));
static_assert(FERRY_F16 == static_cast<int>(DType::kF16));
static_assert(FERRY_BF16 == static_cast<int>(DType::kBF16));
static_assert(FERRY_F32 == static_cast<int>(DType::kF32));
static_assert(FERRY_F64 == static_cast<int>(DType::kF64));
static_assert(FERRY_BYTES == static_cast<int>(DType::kBytes));
static_assert(FERRY_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::kInvalidArgument) + 1);
static_assert(FERRY_ERR_NOT_FOUND == static_cast<int>(ErrorCode::kNotFound) + 1);
static_assert(FERRY_ERR_RESOURCE_EXHAUSTED == static_cast<int>(ErrorCode::kResourceExhausted) + 1);
static_assert(FERRY_ERR_DEADLINE_EXCEEDED == static_cast<int>(ErrorCode::kDeadlineExceeded) + 1);
static_assert(FERRY_ERR_UNAVAILABLE == static_cast<int>(ErrorCode::kUnavailable) + 1);
static_assert(FERRY_ERR_INTERNAL == static_cast<int>(ErrorCode::kInternal) + 1);
static_assert(FERRY_ERR_CANCELLED == static_cast<int>(ErrorCode::kCancelled) + 1);
static_assert(FERRY_MAX_RANK == 8);

namespace {

// The table a version needs at least (version 1's ends at postprocess).
constexpr size_t kMinTableSizeV1 = offsetof(ferry_plugin, postprocess) + sizeof(void*);
constexpr size_t kMinTableSizeV2 = offsetof(ferry_plugin, run) + sizeof(void*);
constexpr size_t kMaxNameBytes = 256;  // A model or tensor name a plugin hands over.

}  // namespace

Result<std::shared_ptr<Plugin>> Plugin::Open(const std::string& path) {
  Result<OpenedFile> file = OpenRegularFile(path, Symlinks::kRefuse);
  if (!file.ok()) {
    return Error{file.error().code, "plugin " + path + ": " + file.error().message};
  }
  // Loading through the checked descriptor: the file dlopen maps is the one checked. The
  // descriptor stays open while the plugin is loaded: dlopen knows an object by its name, so
  // a "/proc/self/fd/N" reused for another file would return the first object loaded by it.
  std::string through = "/proc/self/fd/" + std::to_string(file->fd);
  dlerror();
  void* handle = dlopen(through.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    close(file->fd);
    const char* why = dlerror();
    return InvalidArgument("plugin " + path + ": not loadable: " + (why ? why : "dlopen failed"));
  }
  auto refuse = [&](const std::string& why) {
    dlclose(handle);
    close(file->fd);
    return InvalidArgument("plugin " + path + ": " + why);
  };
  // The symbol names the version the table claims; a version 1 plugin exports the old name.
  uint32_t symbol_version = 2;  // Versions 2 and 3 share the symbol and the table.
  const char* symbol = FERRY_PLUGIN_ENTRY_SYMBOL;
  auto entry = reinterpret_cast<ferry_plugin_entry_fn>(dlsym(handle, symbol));
  if (entry == nullptr) {
    symbol_version = 1;
    symbol = FERRY_PLUGIN_ENTRY_SYMBOL_V1;
    entry = reinterpret_cast<ferry_plugin_entry_fn>(dlsym(handle, symbol));
  }
  if (entry == nullptr) {
    dlclose(handle);
    return InvalidArgument("plugin " + path +
                           ": no " FERRY_PLUGIN_ENTRY_SYMBOL
                           " symbol (is it a ferry hook plugin?)");
  }
  const ferry_plugin* table = entry();
  size_t needed = symbol_version == 1 ? kMinTableSizeV1 : kMinTableSizeV2;
  std::string refusal;
  if (table == nullptr) {
    refusal = std::string(symbol) + " returned no table";
  } else if (table->abi_version != symbol_version &&
             !(symbol_version == 2 && table->abi_version == 3)) {
    refusal = "built for plugin ABI version " + std::to_string(table->abi_version) + " (through " +
              symbol + "), this ferry-hookhost speaks versions 1 to " +
              std::to_string(FERRY_PLUGIN_ABI_VERSION);
  } else if (table->struct_size < needed) {
    refusal = "its function table has " + std::to_string(table->struct_size) + " bytes, version " +
              std::to_string(symbol_version) + " needs " + std::to_string(needed);
  } else if (table->create == nullptr || table->destroy == nullptr) {
    refusal = "create and destroy are required";
  }
  if (!refusal.empty()) {
    return refuse(refusal);
  }
  return std::shared_ptr<Plugin>(new Plugin(handle, file->fd, table, table->abi_version, path));
}

Plugin::~Plugin() {
  dlclose(handle_);
  close(fd_);
}

Error PluginError(std::string_view who, int32_t returned, const ferry_error& error) {
  int32_t code = error.code != FERRY_OK ? error.code : returned;
  // FERRY_ERR_* values are ErrorCode + 1; anything else is INTERNAL.
  ErrorCode ferry_code = ErrorCode::kInternal;
  if (code >= FERRY_ERR_INVALID_ARGUMENT && code <= FERRY_ERR_CANCELLED) {
    ferry_code = static_cast<ErrorCode>(code - 1);
  }
  size_t length = strnlen(error.message, sizeof(error.message));
  std::string message(error.message, length);
  if (message.empty()) {
    message = "failed with code " + std::to_string(returned);
  }
  return {ferry_code, std::string(who) + ": " + message};
}

Result<std::unique_ptr<PluginInstance>> PluginInstance::Create(std::shared_ptr<Plugin> plugin,
                                                               const std::string& config) {
  ferry_error error{};
  void* state = nullptr;
  int32_t returned = plugin->table().create(config.c_str(), &state, &error);
  if (returned != FERRY_OK) {
    return PluginError("plugin " + plugin->path() + " create", returned, error);
  }
  return std::unique_ptr<PluginInstance>(new PluginInstance(std::move(plugin), state));
}

PluginInstance::~PluginInstance() { plugin_->table().destroy(state_); }

namespace {

struct CallContext {
  const OutputAllocator* allocate;
  std::span<const std::string> names;
  std::vector<AllocatedTensor>* out;
  std::vector<bool> given;
};

void* AllocateTrampoline(void* host, uint32_t index, uint32_t dtype, uint32_t rank,
                         const int64_t* shape) {
  auto* call = static_cast<CallContext*>(host);
  if (index >= call->names.size() || call->given[index] || rank > FERRY_MAX_RANK ||
      dtype > FERRY_F64 || (rank > 0 && shape == nullptr)) {
    return nullptr;
  }
  Shape dims(shape, shape + rank);
  std::optional<AllocatedTensor> tensor = (*call->allocate)(index, static_cast<DType>(dtype), dims);
  if (!tensor) {
    return nullptr;
  }
  call->given[index] = true;
  (*call->out)[index] = *tensor;
  return tensor->bytes.data();
}

}  // namespace

Status PluginInstance::Call(const Entry& entry, std::string_view what,
                            std::span<const TensorView> inputs, std::span<const std::string> names,
                            const OutputAllocator& allocate,
                            std::vector<AllocatedTensor>* out) const {
  std::vector<ferry_tensor> tensors(inputs.size());
  std::vector<std::string> input_names(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& in = inputs[i];
    input_names[i] = std::string(in.name);
    ferry_tensor& t = tensors[i];
    t.name = input_names[i].c_str();
    t.dtype = static_cast<uint32_t>(in.dtype);
    t.rank = static_cast<uint32_t>(in.shape.size());
    for (size_t k = 0; k < in.shape.size() && k < FERRY_MAX_RANK; ++k) {
      t.shape[k] = in.shape[k];
    }
    t.data = in.bytes.data();
    t.bytes = in.bytes.size();
  }
  std::vector<const char*> c_names(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    c_names[i] = names[i].c_str();
  }
  out->assign(names.size(), AllocatedTensor{});
  CallContext context{&allocate, names, out, std::vector<bool>(names.size(), false)};
  ferry_outputs outputs{static_cast<uint32_t>(names.size()), c_names.data(), &context,
                        &AllocateTrampoline};
  ferry_error error{};
  int32_t returned =
      entry(state_, tensors.data(), static_cast<uint32_t>(tensors.size()), &outputs, &error);
  std::string who = "plugin " + plugin_->path() + " " + std::string(what);
  // Only the buffers actually given out are the caller's to free.
  std::vector<AllocatedTensor> given;
  for (size_t i = 0; i < names.size(); ++i) {
    if (context.given[i]) {
      given.push_back((*out)[i]);
    }
  }
  if (returned != FERRY_OK) {
    *out = std::move(given);
    return PluginError(who, returned, error);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!context.given[i]) {
      *out = std::move(given);
      return Internal(who + " returned OK without writing output '" + names[i] + "'");
    }
  }
  return OkStatus();
}

Status PluginInstance::Preprocess(std::span<const TensorView> inputs,
                                  std::span<const std::string> names,
                                  const OutputAllocator& allocate,
                                  std::vector<AllocatedTensor>* out) const {
  return Call(plugin_->table().preprocess, "preprocess", inputs, names, allocate, out);
}

Status PluginInstance::Postprocess(std::span<const TensorView> inputs,
                                   std::span<const std::string> names,
                                   const OutputAllocator& allocate,
                                   std::vector<AllocatedTensor>* out) const {
  return Call(plugin_->table().postprocess, "postprocess", inputs, names, allocate, out);
}

namespace {

// A pipeline run's host->call(): the plugin's ferry_calls checked, the caller's outputs kept
// alive (and pointed at) until the run returns.
struct RunContext {
  std::thread::id thread;  // run()'s: host->call and host->send are served on it alone.
  const ModelCaller* call;
  std::deque<std::vector<OwnedTensor>> outputs;
  std::deque<std::vector<ferry_tensor>> views;
  const ResponseSender* send = nullptr;  // A decoupled run's.
  uint32_t sent = 0;
};

int32_t Refuse(ferry_error* error, int32_t code, const std::string& message) {
  if (error != nullptr) {
    error->code = code;
    std::snprintf(error->message, sizeof(error->message), "%s", message.c_str());
  }
  return code;
}

// A C string the plugin handed over, read at most kMaxNameBytes; nullopt when longer or NULL.
std::optional<std::string> ReadName(const char* name) {
  if (name == nullptr) {
    return std::nullopt;
  }
  size_t length = strnlen(name, kMaxNameBytes);
  if (length == kMaxNameBytes) {
    return std::nullopt;
  }
  return std::string(name, length);
}

// The plugin's ferry_call as a ModelCall, or why it is malformed. `c` is a copy (the plugin
// could change its own while this checks); each input is copied before it is checked too.
Result<ModelCall> CheckCall(const ferry_call c, uint32_t index) {
  std::string which = "call " + std::to_string(index);
  std::optional<std::string> model = ReadName(c.model);
  if (!model) {
    return InvalidArgument(which + ": model name NULL or longer than 255 bytes");
  }
  which += " (model '" + *model + "')";
  if (c.num_inputs > FERRY_MAX_CALL_TENSORS || (c.num_inputs > 0 && c.inputs == nullptr)) {
    return InvalidArgument(which + ": " + std::to_string(c.num_inputs) + " inputs (at most " +
                           std::to_string(FERRY_MAX_CALL_TENSORS) +
                           ", and a NULL array only for none)");
  }
  ModelCall call{*model, {}};
  for (uint32_t i = 0; i < c.num_inputs; ++i) {
    const ferry_tensor t = c.inputs[i];
    std::optional<std::string> name = ReadName(t.name);
    if (!name || t.dtype > FERRY_F64 || t.rank > FERRY_MAX_RANK) {
      return InvalidArgument(which + ": input " + std::to_string(i) +
                             " has no valid name, dtype or rank");
    }
    Shape shape(t.shape, t.shape + t.rank);
    std::optional<uint64_t> bytes = TensorByteSize(static_cast<DType>(t.dtype), shape);
    if (!bytes || *bytes != t.bytes || (t.bytes > 0 && t.data == nullptr)) {
      return InvalidArgument(which + ": input '" + *name + "' holds " + std::to_string(t.bytes) +
                             " bytes, its dtype and shape say otherwise (or its data is NULL)");
    }
    // The name's bytes are the plugin's, NUL-terminated within bounds (checked above).
    call.inputs.push_back({std::string_view(t.name, name->size()),
                           static_cast<DType>(t.dtype),
                           std::move(shape),
                           {static_cast<const uint8_t*>(t.data), static_cast<size_t>(t.bytes)}});
  }
  return call;
}

int32_t CallTrampoline(void* host, ferry_call* calls, uint32_t count, ferry_error* error) {
  auto* run = static_cast<RunContext*>(host);
  if (run != nullptr && std::this_thread::get_id() != run->thread) {
    return Refuse(error, FERRY_ERR_INVALID_ARGUMENT,
                  "host->call: only from the thread running run(), one call at a time");
  }
  if (run == nullptr || calls == nullptr || count == 0 || count > FERRY_MAX_CALLS) {
    return Refuse(error, FERRY_ERR_INVALID_ARGUMENT,
                  "host->call: 1 to " + std::to_string(FERRY_MAX_CALLS) + " calls, got " +
                      std::to_string(count) + (calls == nullptr ? " (NULL)" : ""));
  }
  std::vector<ModelCall> checked;
  for (uint32_t i = 0; i < count; ++i) {
    Result<ModelCall> call = CheckCall(calls[i], i);
    if (!call.ok()) {
      return Refuse(error, FERRY_ERR_INVALID_ARGUMENT, "host->call: " + call.error().message);
    }
    checked.push_back(std::move(*call));
  }
  Result<std::vector<std::vector<OwnedTensor>>> results = (*run->call)(checked);
  if (!results.ok()) {
    return Refuse(error, static_cast<int32_t>(results.error().code) + 1, results.error().message);
  }
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<OwnedTensor>& owned = run->outputs.emplace_back(std::move((*results)[i]));
    std::vector<ferry_tensor>& views = run->views.emplace_back(owned.size());
    for (size_t o = 0; o < owned.size(); ++o) {
      ferry_tensor& t = views[o];
      t.name = owned[o].name.c_str();
      t.dtype = static_cast<uint32_t>(owned[o].dtype);
      t.rank = static_cast<uint32_t>(owned[o].shape.size());
      std::copy(owned[o].shape.begin(), owned[o].shape.end(), t.shape);
      t.data = owned[o].bytes.data();
      t.bytes = owned[o].bytes.size();
    }
    calls[i].num_outputs = static_cast<uint32_t>(views.size());
    calls[i].outputs = views.data();
  }
  return FERRY_OK;
}

}  // namespace

// A decoupled run's host->send(): the tensors checked as a call's inputs are, then handed on.
int32_t SendTrampoline(void* host, const ferry_tensor* outputs, uint32_t num_outputs,
                       ferry_error* error) {
  auto* run = static_cast<RunContext*>(host);
  if (run == nullptr || run->send == nullptr || std::this_thread::get_id() != run->thread) {
    return Refuse(error, FERRY_ERR_INVALID_ARGUMENT,
                  "host->send: only from the thread running a decoupled pipeline's run()");
  }
  if (run->sent >= FERRY_MAX_RESPONSES) {
    return Refuse(error, FERRY_ERR_RESOURCE_EXHAUSTED,
                  "host->send: more than " + std::to_string(FERRY_MAX_RESPONSES) +
                      " responses to one request");
  }
  Result<ModelCall> response =
      CheckCall(ferry_call{"response", outputs, num_outputs, 0, nullptr}, run->sent);
  if (!response.ok()) {
    return Refuse(error, FERRY_ERR_INVALID_ARGUMENT, "host->send: " + response.error().message);
  }
  Status sent = (*run->send)(response->inputs);
  run->sent += sent.ok() ? 1 : 0;
  if (!sent.ok()) {
    return Refuse(error, static_cast<int32_t>(sent.error().code) + 1,
                  "host->send: " + sent.error().message);
  }
  return FERRY_OK;
}

Status PluginInstance::Run(std::span<const TensorView> inputs, std::span<const std::string> names,
                           const OutputAllocator& allocate, const ModelCaller& call,
                           const ResponseSender* send, std::vector<AllocatedTensor>* out) const {
  RunContext context{std::this_thread::get_id(), &call, {}, {}, send};
  ferry_host host{&context, &CallTrampoline, send != nullptr ? &SendTrampoline : nullptr};
  auto run = plugin_->table().run;
  return Call([run, &host](
                  void* state, const ferry_tensor* tensors, uint32_t count, ferry_outputs* outputs,
                  ferry_error* error) { return run(state, tensors, count, &host, outputs, error); },
              "run", inputs, names, allocate, out);
}

}  // namespace ferry::hookhost
