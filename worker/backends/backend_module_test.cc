// LoadBackendModule against missing, hostile and foreign module files, and a module that
// works. The fake modules are built beside this test (fake_backend_module.cc).
#include "worker/backends/backend_module.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// The fake module `file` (a build output) installed in `dir` as the CUDA module's name.
fs::path Install(const TempDir& dir, const std::string& file, fs::perms perms = fs::perms(0755)) {
  fs::path to = fs::path(dir.path()) / kCudaModuleName;
  fs::copy_file(fs::path(FERRY_FAKE_MODULE_DIR) / file, to, fs::copy_options::overwrite_existing);
  fs::permissions(to, perms);
  return to;
}

Result<std::unique_ptr<Backend>> Load(const TempDir& dir, int device = 3) {
  uint8_t memory[64] = {};
  FerryHostRegion region{memory, sizeof(memory), 0};
  FerryBackendArgs args{device, &region, 1};
  return LoadBackendModule({dir.path()}, kCudaModuleName, args);
}

std::string Message(const Result<std::unique_ptr<Backend>>& r) {
  return r.ok() ? "" : r.error().message;
}

TEST_CASE("a module that works is loaded and serves") {
  TempDir dir;
  Install(dir, "libferry_fake_works.so");
  Result<std::unique_ptr<Backend>> backend = Load(dir);
  REQUIRE_MESSAGE(backend.ok(), Message(backend));
  CHECK((*backend)->name() == "sim");
}

TEST_CASE("no module anywhere: unavailable, naming where it looked and the package") {
  TempDir a;
  TempDir b;
  FerryBackendArgs args{1, nullptr, 0};
  Result<std::unique_ptr<Backend>> r =
      LoadBackendModule({a.path(), b.path()}, kCudaModuleName, args);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kUnavailable);
  CHECK(Message(r).find("device 1") != std::string::npos);
  CHECK(Message(r).find(a.path()) != std::string::npos);
  CHECK(Message(r).find(b.path()) != std::string::npos);
  CHECK(Message(r).find("ferry-cuda") != std::string::npos);
}

TEST_CASE("the first directory holding the module wins") {
  TempDir empty;
  TempDir dir;
  Install(dir, "libferry_fake_works.so");
  FerryBackendArgs args{0, nullptr, 0};
  // The working module refuses zero regions: reaching it proves the second directory was read.
  Result<std::unique_ptr<Backend>> r =
      LoadBackendModule({empty.path(), dir.path()}, kCudaModuleName, args);
  REQUIRE_FALSE(r.ok());
  CHECK(Message(r).find("not installed") == std::string::npos);
}

TEST_CASE("a missing library the module needs is named, as a missing cuBLAS would be") {
  TempDir dir;
  Install(dir, "libferry_fake_needs_absent.so");
  Result<std::unique_ptr<Backend>> r = Load(dir);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kUnavailable);
  CHECK(Message(r).find("libferry_fake_dependency.so") != std::string::npos);
  CHECK(Message(r).find("device 3") != std::string::npos);
}

TEST_CASE("a module of another build is refused before any of it runs beyond its ABI") {
  TempDir dir;
  Install(dir, "libferry_fake_foreign.so");
  Result<std::unique_ptr<Backend>> r = Load(dir);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kInvalidArgument);
  CHECK(Message(r).find("ferry-backend-0 from another build") != std::string::npos);
  CHECK(Message(r).find(kBackendModuleAbi) != std::string::npos);
}

TEST_CASE("the module's own reason for not creating a backend is passed on") {
  TempDir dir;
  Install(dir, "libferry_fake_fails.so");
  Result<std::unique_ptr<Backend>> r = Load(dir, 5);
  REQUIRE_FALSE(r.ok());
  CHECK(Message(r).find("fake: no device 5 here") != std::string::npos);
  CHECK(Message(r).find("device 5: ") == 0);
}

TEST_CASE("hostile module files are refused without running them") {
  TempDir dir;
  fs::path path = fs::path(dir.path()) / kCudaModuleName;
  SUBCASE("a FIFO (dlopen would block on it)") {
    REQUIRE(mkfifo(path.c_str(), 0644) == 0);
    CHECK(Message(Load(dir)).find("not a regular file") != std::string::npos);
  }
  SUBCASE("a directory") {
    fs::create_directory(path);
    CHECK(Message(Load(dir)).find("not a regular file") != std::string::npos);
  }
  SUBCASE("writable by others or by its group") {
    Install(dir, "libferry_fake_works.so", fs::perms(0757));
    CHECK(Message(Load(dir)).find("writable by its group or others") != std::string::npos);
    fs::permissions(path, fs::perms(0775));
    CHECK(Message(Load(dir)).find("writable by its group or others") != std::string::npos);
  }
  SUBCASE("owned by another user") {
    Install(dir, "libferry_fake_works.so");
    uid_t other = geteuid() == 0 ? 12345 : geteuid() + 1;
    if (chown(path.c_str(), other, static_cast<gid_t>(-1)) == 0) {
      CHECK(Message(Load(dir)).find("owned by uid") != std::string::npos);
    }
  }
  SUBCASE("a dangling link") {
    fs::create_symlink(fs::path(dir.path()) / "gone.so", path);
    CHECK(Message(Load(dir)).find("dangling") != std::string::npos);
  }
  SUBCASE("not an ELF file, or a truncated one") {
    std::ofstream(path) << "#!/bin/sh\necho this is not a shared object\n";
    Result<std::unique_ptr<Backend>> r = Load(dir);
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
    CHECK(Message(r).find("not an ELF file") != std::string::npos);
    std::ofstream(path, std::ios::trunc);
    CHECK(Message(Load(dir)).find("not an ELF file") != std::string::npos);
    std::string whole;
    {
      std::ifstream in(fs::path(FERRY_FAKE_MODULE_DIR) / "libferry_fake_works.so",
                       std::ios::binary);
      whole.assign(std::istreambuf_iterator<char>(in), {});
    }
    // Cut inside the program headers, then inside the last segment: glibc's loader would
    // touch pages past the end of the file (SIGBUS) rather than refuse either.
    for (size_t cut : {size_t{100}, whole.size() / 2, whole.size() - 1}) {
      CAPTURE(cut);
      fs::remove(path);  // A new file each time: never rewrite one a loader may have mapped.
      std::ofstream(path, std::ios::binary) << whole.substr(0, cut);
      CHECK(Message(Load(dir)).find("is truncated") != std::string::npos);
    }
    // A header for another machine.
    std::string other = whole;
    other[18] = 0x28;  // e_machine: EM_ARM.
    fs::remove(path);
    std::ofstream(path, std::ios::binary) << other;
    CHECK(Message(Load(dir)).find("not a shared object for this machine") != std::string::npos);
  }
  SUBCASE("a shared object that is not a backend module") {
    Install(dir, "absent/libferry_fake_dependency.so");
    CHECK(Message(Load(dir)).find("not a ferry backend module") != std::string::npos);
  }
}

TEST_CASE("the installed layout: libexec/ferry/ferry-worker finds lib/ferry/backends") {
  std::vector<fs::path> dirs = DefaultModuleDirs("/usr/libexec/ferry");
  REQUIRE(dirs.size() == 2);
  CHECK(dirs[0].lexically_normal() == "/usr/lib/ferry/backends");
  CHECK(dirs[1] == "/usr/libexec/ferry");
}

#if defined(FERRY_CUDA_MODULE)
TEST_CASE("the real CUDA module loads here; without a GPU it says so, naming its CUDA") {
  FerryBackendArgs args{0, nullptr, 0};
  Result<std::unique_ptr<Backend>> r =
      LoadBackendModule({fs::path(FERRY_CUDA_MODULE).parent_path()}, kCudaModuleName, args);
  if (r.ok()) {
    CHECK((*r)->name() == "cuda");
  } else {
    MESSAGE(Message(r));
    CHECK(Message(r).find("CUDA runtime") != std::string::npos);
    CHECK(Message(r).find("device 0: ") == 0);
  }
}
#endif

}  // namespace
}  // namespace ferry
