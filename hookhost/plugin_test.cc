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
  CHECK(plugin.error().message.find("ABI version 2, this ferry-hookhost speaks version 1") !=
        std::string::npos);
}

TEST_CASE("files that are not plugins are refused with their path, never loaded or waited on") {
  testing::TempDir dir;
  Result<std::shared_ptr<Plugin>> no_entry = Plugin::Open(PluginPath("no_entry"));
  REQUIRE_FALSE(no_entry.ok());
  CHECK(no_entry.error().message.find("no ferry_plugin_entry_v1 symbol") != std::string::npos);

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
  CHECK(no_entry.error().message.find("no ferry_plugin_entry_v1 symbol") != std::string::npos);
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

}  // namespace
}  // namespace ferry::hookhost
