#include "hookhost/plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

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
static_assert(FERRY_ERR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::kInvalidArgument) + 1);
static_assert(FERRY_ERR_RESOURCE_EXHAUSTED == static_cast<int>(ErrorCode::kResourceExhausted) + 1);
static_assert(FERRY_ERR_INTERNAL == static_cast<int>(ErrorCode::kInternal) + 1);
static_assert(FERRY_MAX_RANK == 8);

namespace {

constexpr size_t kMinTableSize = offsetof(ferry_plugin, postprocess) + sizeof(void*);

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
  auto entry = reinterpret_cast<ferry_plugin_entry_fn>(dlsym(handle, FERRY_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    dlclose(handle);
    return InvalidArgument("plugin " + path +
                           ": no " FERRY_PLUGIN_ENTRY_SYMBOL
                           " symbol (is it a ferry hook plugin?)");
  }
  const ferry_plugin* table = entry();
  std::string refusal;
  if (table == nullptr) {
    refusal = FERRY_PLUGIN_ENTRY_SYMBOL " returned no table";
  } else if (table->abi_version != FERRY_PLUGIN_ABI_VERSION) {
    refusal = "built for plugin ABI version " + std::to_string(table->abi_version) +
              ", this ferry-hookhost speaks version " + std::to_string(FERRY_PLUGIN_ABI_VERSION);
  } else if (table->struct_size < kMinTableSize) {
    refusal = "its function table has " + std::to_string(table->struct_size) +
              " bytes, version 1 needs " + std::to_string(kMinTableSize);
  } else if (table->create == nullptr || table->destroy == nullptr) {
    refusal = "create and destroy are required";
  }
  if (!refusal.empty()) {
    return refuse(refusal);
  }
  return std::shared_ptr<Plugin>(new Plugin(handle, file->fd, table, path));
}

Plugin::~Plugin() {
  dlclose(handle_);
  close(fd_);
}

Error PluginError(std::string_view who, int32_t returned, const ferry_error& error) {
  int32_t code = error.code != FERRY_OK ? error.code : returned;
  ErrorCode ferry_code = ErrorCode::kInternal;
  if (code == FERRY_ERR_INVALID_ARGUMENT) {
    ferry_code = ErrorCode::kInvalidArgument;
  } else if (code == FERRY_ERR_RESOURCE_EXHAUSTED) {
    ferry_code = ErrorCode::kResourceExhausted;
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

Status PluginInstance::Call(Entry entry, std::string_view what, std::span<const TensorView> inputs,
                            std::span<const std::string> names, const OutputAllocator& allocate,
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

}  // namespace ferry::hookhost
