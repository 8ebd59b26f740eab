#include "worker/backends/backend_module.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace ferry {
namespace {

std::string Where(const FerryBackendArgs& args) {
  return "device " + std::to_string(args.device) + ": ";
}

// The ELF header and program headers of a shared object for this machine, every segment
// inside the file. glibc's loader maps segments without checking them against the file's
// size, and touching a page past the end raises SIGBUS: a truncated module would crash the
// worker instead of being refused.
Status CheckElf(const std::filesystem::path& path, uint64_t file_size,
                const FerryBackendArgs& args) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(Where(args) + "the backend module " + path.string() + " " + why);
  };
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header)) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    return bad("is not an ELF file");
  }
#if defined(__x86_64__)
  constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr uint16_t kMachine = EM_AARCH64;
#endif
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
      header.e_type != ET_DYN || header.e_machine != kMachine ||
      header.e_phentsize != sizeof(Elf64_Phdr)) {
    return bad("is not a shared object for this machine");
  }
  uint64_t headers_end = 0;
  if (__builtin_mul_overflow(uint64_t{header.e_phnum}, sizeof(Elf64_Phdr), &headers_end) ||
      __builtin_add_overflow(headers_end, header.e_phoff, &headers_end) ||
      headers_end > file_size) {
    return bad("is truncated (its program headers end past the file)");
  }
  uint64_t sections_end = 0;
  if (__builtin_mul_overflow(uint64_t{header.e_shnum}, uint64_t{header.e_shentsize},
                             &sections_end) ||
      __builtin_add_overflow(sections_end, header.e_shoff, &sections_end) ||
      sections_end > file_size) {
    return bad("is truncated (its section headers end past the file)");
  }
  in.seekg(static_cast<std::streamoff>(header.e_phoff));
  for (uint16_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    uint64_t end = 0;
    if (!in.read(reinterpret_cast<char*>(&segment), sizeof(segment)) ||
        __builtin_add_overflow(segment.p_offset, segment.p_filesz, &end) || end > file_size) {
      return bad("is truncated (segment " + std::to_string(i) + " ends past the file)");
    }
  }
  return OkStatus();
}

// The file's type and permissions, checked before dlopen runs any of its code.
Status CheckModuleFile(const std::filesystem::path& path, const FerryBackendArgs& args) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return Unavailable(Where(args) + "cannot read " + path.string() + ": " + strerror(errno));
  }
  if (S_ISLNK(st.st_mode) && stat(path.c_str(), &st) != 0) {
    return Unavailable(Where(args) + path.string() + " is a dangling link");
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(Where(args) + "the backend module " + path.string() +
                           " is not a regular file");
  }
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return InvalidArgument(Where(args) + "the backend module " + path.string() +
                           " is owned by uid " + std::to_string(st.st_uid) +
                           ", neither root nor this worker's user: not loaded");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return InvalidArgument(Where(args) + "the backend module " + path.string() +
                           " is writable by its group or others: not loaded");
  }
  return CheckElf(path, static_cast<uint64_t>(st.st_size), args);
}

}  // namespace

std::vector<std::filesystem::path> DefaultModuleDirs(const std::filesystem::path& executable_dir) {
  return {executable_dir / ".." / ".." / "lib" / "ferry" / "backends", executable_dir};
}

Result<std::unique_ptr<Backend>> LoadBackendModule(const std::vector<std::filesystem::path>& dirs,
                                                   const std::string& name,
                                                   const FerryBackendArgs& args) {
  std::filesystem::path path;
  std::string searched;
  for (const std::filesystem::path& dir : dirs) {
    std::filesystem::path candidate = (dir / name).lexically_normal();
    struct stat st {};
    if (lstat(candidate.c_str(), &st) == 0) {
      path = candidate;
      break;
    }
    searched += (searched.empty() ? "" : ", ") + candidate.parent_path().string();
  }
  if (path.empty()) {
    return Unavailable(Where(args) + "the backend module " + name +
                       " is not installed (looked in " + searched +
                       "); install the package that carries it (ferry-cuda)");
  }
  FERRY_RETURN_IF_ERROR(CheckModuleFile(path, args));
  // RTLD_LOCAL: the module's symbols stay its own; RTLD_NOW: a missing symbol fails here,
  // not in the middle of a batch.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Unavailable(Where(args) + "cannot load the backend module " + path.string() + ": " +
                       (why != nullptr ? why : "unknown loader error") +
                       " (the CUDA libraries it was built against must be on the loader's path: "
                       "see docs/operations.md)");
  }
  auto abi = reinterpret_cast<FerryBackendAbiFn>(dlsym(handle, kBackendAbiSymbol));
  auto create = reinterpret_cast<FerryCreateBackendFn>(dlsym(handle, kCreateBackendSymbol));
  if (abi == nullptr || create == nullptr) {
    dlclose(handle);
    return InvalidArgument(Where(args) + path.string() + " is not a ferry backend module (no " +
                           kBackendAbiSymbol + " or " + kCreateBackendSymbol + ")");
  }
  const char* module_abi = abi();
  if (module_abi == nullptr || std::strcmp(module_abi, kBackendModuleAbi) != 0) {
    std::string theirs = module_abi == nullptr ? "none" : std::string(module_abi).substr(0, 200);
    dlclose(handle);
    return InvalidArgument(Where(args) + path.string() + " was built for '" + theirs +
                           "', this worker is '" + kBackendModuleAbi +
                           "': install the module of the same build");
  }
  char error[1024] = {};
  Backend* backend = create(&args, error, sizeof(error));
  if (backend == nullptr) {
    error[sizeof(error) - 1] = '\0';
    // The handle stays open: a failed create may have started threads inside the module
    // (the CUDA runtime's), which must not lose their code.
    return Unavailable(Where(args) + (error[0] != '\0' ? error : "the backend module failed"));
  }
  return std::unique_ptr<Backend>(backend);
}

}  // namespace ferry
