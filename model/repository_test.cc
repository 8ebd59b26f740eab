// The repository's versioned layout: version directories, version_policy and model keys.
#include "model/repository.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/scheduler_config.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Writes the example mlp as version `version` of `repo`/mlp; `policy` is appended to its
// manifest's top level and `stated` replaces its "version = 1" line.
void AddVersion(const std::string& repo, int64_t version, const std::string& policy = "",
                const std::string& stated = "") {
  std::string target = repo + "/mlp/" + std::to_string(version);
  fs::create_directories(target);
  fs::copy_file("examples/models/mlp/weights.safetensors", target + "/weights.safetensors");
  std::ifstream in("examples/models/mlp/manifest.toml");
  std::ostringstream text;
  text << in.rdbuf();
  std::string manifest = text.str();
  size_t line = manifest.find("version = 1\n");
  REQUIRE(line != std::string::npos);
  manifest.replace(line, 12, stated.empty() ? policy + "\n" : stated + "\n" + policy + "\n");
  testing::WriteFile(target + "/manifest.toml", manifest);
}

TEST_CASE("model keys: a name, or NAME/V with a plain positive version") {
  CHECK(IsValidModelKey("mlp"));
  CHECK(IsValidModelKey("mlp/1"));
  CHECK(IsValidModelKey("mlp/123456789012345678"));
  for (const char* bad : {"mlp/", "mlp/0", "mlp/01", "mlp/-1", "mlp/1/2", "mlp/x", "/1", "../1",
                          "mlp/1234567890123456789", "..", "mlp/1 "}) {
    CHECK_MESSAGE(!IsValidModelKey(bad), bad);
  }
  CHECK_FALSE(IsValidModelKey(std::string(125, 'a') + "/1234"));  // 130 bytes.
  CHECK(ModelKeyName("mlp/7") == "mlp");
  CHECK(ModelKeyVersion("mlp/7") == 7);
  CHECK(ModelKeyVersion("mlp") == 0);
}

TEST_CASE("version_policy: latest N, all, specific; anything else is named") {
  auto parse = [](const std::string& policy) {
    return ParseManifest("name = \"m\"\n" + policy +
                             "\n[[inputs]]\nname=\"x\"\ndtype=\"FP32\"\nshape=[-1,2]\n"
                             "[[outputs]]\nname=\"y\"\ndtype=\"FP32\"\nshape=[-1,2]\n"
                             "[batching]\nsizes=[1]\n[[program]]\nop=\"relu\"\ninput=\"x\"\n"
                             "output=\"y\"\n",
                         "m.toml");
  };
  Result<Manifest> none = parse("");
  REQUIRE(none.ok());
  CHECK(none->version_policy.kind == VersionPolicy::Kind::kLatest);
  CHECK(none->version_policy.latest == 1);
  CHECK_FALSE(none->version_stated);
  Result<Manifest> latest = parse("version_policy = { latest = 3 }");
  REQUIRE(latest.ok());
  CHECK(latest->version_policy.latest == 3);
  CHECK(parse("version_policy = \"all\"")->version_policy.kind == VersionPolicy::Kind::kAll);
  Result<Manifest> specific = parse("version_policy = { specific = [1, 3] }");
  REQUIRE(specific.ok());
  CHECK(specific->version_policy.kind == VersionPolicy::Kind::kSpecific);
  CHECK(specific->version_policy.specific == std::vector<int64_t>{1, 3});
  for (const char* bad :
       {"version_policy = \"newest\"", "version_policy = 3", "version_policy = { latest = 0 }",
        "version_policy = { latest = 17 }", "version_policy = { latest = 1, specific = [1] }",
        "version_policy = {}", "version_policy = { specific = [] }",
        "version_policy = { specific = [0] }", "version_policy = { oldest = 1 }", "version = 0",
        "version = 1000000000000000000"}) {
    Result<Manifest> m = parse(bad);
    REQUIRE_MESSAGE(!m.ok(), bad);
    CHECK_MESSAGE(Contains(m.error().message, "version"), m.error().message);
  }
}

TEST_CASE("a versioned model serves the versions its newest manifest's policy selects") {
  testing::TempDir dir;
  std::string repo = dir / "repo";
  AddVersion(repo, 1);
  AddVersion(repo, 3);
  AddVersion(repo, 10);
  fs::create_directories(repo + "/mlp/07");     // Not a version number: ignored.
  fs::create_directories(repo + "/mlp/notes");  // Ignored too.
  CHECK(PresentVersions(repo, "mlp") == std::vector<int64_t>{1, 3, 10});
  // Default: latest 1, by number (10 after 3, not before it).
  CHECK(ListRepository(repo).value() == std::vector<std::string>{"mlp/10"});

  fs::remove_all(repo + "/mlp/10");
  AddVersion(repo, 10, "version_policy = { latest = 2 }");
  CHECK(ModelKeys(repo, "mlp") == std::vector<std::string>{"mlp/3", "mlp/10"});
  fs::remove_all(repo + "/mlp/10");
  AddVersion(repo, 10, "version_policy = \"all\"");
  CHECK(ModelKeys(repo, "mlp") == std::vector<std::string>{"mlp/1", "mlp/3", "mlp/10"});
  // "all" serves at most the newest 16.
  for (int64_t v = 20; v < 36; ++v) {
    fs::create_directories(repo + "/mlp/" + std::to_string(v));
  }
  fs::remove_all(repo + "/mlp/10");
  AddVersion(repo, 40, "version_policy = \"all\"");
  std::vector<std::string> all = ModelKeys(repo, "mlp");
  REQUIRE(all.size() == 16);
  CHECK(all.front() == "mlp/21");
  CHECK(all.back() == "mlp/40");
  for (int64_t v = 20; v < 36; ++v) {
    fs::remove_all(repo + "/mlp/" + std::to_string(v));
  }
  fs::remove_all(repo + "/mlp/40");
  AddVersion(repo, 10, "version_policy = { specific = [1, 2, 10] }");
  CHECK(ModelKeys(repo, "mlp") == std::vector<std::string>{"mlp/1", "mlp/10"});

  Result<Bundle> one = LoadRepositoryBundle(repo, "mlp/1");
  REQUIRE(one.ok());
  CHECK(one->manifest.name == "mlp");
  CHECK(one->manifest.version == 1);  // The directory's number.
  CHECK(LoadRepositoryBundle(repo, "mlp/10")->manifest.version == 10);
  CHECK(LoadRepositoryBundle(repo, "mlp/2").error().code == ErrorCode::kNotFound);

  // A policy selecting none: the model's plain key, refused with the reason.
  fs::remove_all(repo + "/mlp/10");
  AddVersion(repo, 10, "version_policy = { specific = [4] }");
  CHECK(ModelKeys(repo, "mlp") == std::vector<std::string>{"mlp"});
  Result<Bundle> none = LoadRepositoryBundle(repo, "mlp");
  REQUIRE_FALSE(none.ok());
  CHECK(Contains(none.error().message, "selects none"));

  // An unreadable newest manifest: latest 1, which then fails with its own error.
  testing::WriteFile(repo + "/mlp/10/manifest.toml", "name = ");
  CHECK(ModelKeys(repo, "mlp") == std::vector<std::string>{"mlp/10"});
  CHECK_FALSE(LoadRepositoryBundle(repo, "mlp/10").ok());
}

TEST_CASE("a version directory's manifest names its model and may state only its version") {
  testing::TempDir dir;
  std::string repo = dir / "repo";
  AddVersion(repo, 2, "", "version = 2");
  CHECK(LoadRepositoryBundle(repo, "mlp/2").ok());
  AddVersion(repo, 3, "", "version = 2");
  Result<Bundle> wrong = LoadRepositoryBundle(repo, "mlp/3");
  REQUIRE_FALSE(wrong.ok());
  CHECK(Contains(wrong.error().message, "differs from its version directory '3'"));
  // Another model's version directory: the name check refuses it.
  fs::create_directories(repo + "/other");
  fs::copy(repo + "/mlp/2", repo + "/other/1", fs::copy_options::recursive);
  Result<Bundle> foreign = LoadRepositoryBundle(repo, "other/1");
  REQUIRE_FALSE(foreign.ok());
  CHECK(Contains(foreign.error().message, "differs from the bundle directory"));
}

TEST_CASE("hostile keys and links: nothing outside the repository or its place is loaded") {
  testing::TempDir dir;
  std::string repo = dir / "repo";
  AddVersion(repo, 1);
  AddVersion(dir / "elsewhere", 5);
  fs::create_directory_symlink(dir / "elsewhere/mlp/5", repo + "/mlp/5");
  Result<Bundle> outside = LoadRepositoryBundle(repo, "mlp/5");
  REQUIRE_FALSE(outside.ok());
  CHECK(Contains(outside.error().message, "outside its place"));
  // A version directory two levels up resolves outside its model's place too.
  fs::create_directory_symlink(dir / "elsewhere", repo + "/mlp/6");
  CHECK_FALSE(LoadRepositoryBundle(repo, "mlp/6").ok());
  // A version linked into another model's directory, inside the repository: not its place.
  AddVersion(repo + "/other", 1);  // repo/other/mlp/1: a bundle named mlp, two levels down.
  fs::create_directory_symlink(repo + "/other/mlp/1", repo + "/mlp/4");
  Result<Bundle> foreign = LoadRepositoryBundle(repo, "mlp/4");
  REQUIRE_FALSE(foreign.ok());
  CHECK(Contains(foreign.error().message, "outside its place"));
  // A model directory that is itself a link out of the repository.
  fs::create_directory_symlink(dir / "elsewhere/mlp", repo + "/linked");
  Result<Bundle> linked = LoadRepositoryBundle(repo, "linked/5");
  REQUIRE_FALSE(linked.ok());
  CHECK(Contains(linked.error().message, "outside its place"));
  // A version key of a model that is a bundle of its own (a numbered directory inside it).
  fs::create_directories(repo + "/solo");
  fs::copy("examples/models/mlp", repo + "/solo/plain", fs::copy_options::recursive);
  testing::WriteFile(repo + "/solo/manifest.toml", "name = \"solo\"\n");
  fs::copy(repo + "/mlp/1", repo + "/solo/2", fs::copy_options::recursive);
  Result<Bundle> solo = LoadRepositoryBundle(repo, "solo/2");
  REQUIRE_FALSE(solo.ok());
  CHECK(Contains(solo.error().message, "a bundle of its own"));
  CHECK(PresentVersions(repo, "solo").empty());
  for (const char* bad : {"mlp/../../elsewhere/mlp/5", "mlp/1/..", "/etc", "mlp/0", ""}) {
    Result<Bundle> refused = LoadRepositoryBundle(repo, bad);
    REQUIRE_MESSAGE(!refused.ok(), bad);
    CHECK_MESSAGE(refused.error().code == ErrorCode::kInvalidArgument, bad);
  }
  // A FIFO where a version's manifest belongs is refused, not waited on.
  fs::create_directories(repo + "/mlp/7");
  REQUIRE(mkfifo((repo + "/mlp/7/manifest.toml").c_str(), 0600) == 0);
  CHECK(ModelKeys(repo, "mlp") == std::vector<std::string>{"mlp/7"});
  CHECK_FALSE(LoadRepositoryBundle(repo, "mlp/7").ok());
  // The table refuses keys that are not keys, and a key listed twice.
  CHECK_FALSE(LoadModelTable(repo, {"mlp/1", "mlp/1"}).ok());
  CHECK_FALSE(LoadModelTable(repo, {"mlp/01"}).ok());
  Result<std::vector<RepositoryModel>> table = LoadModelTable(repo, {"mlp/1", "-", "mlp/7"});
  REQUIRE(table.ok());
  CHECK((*table)[0].bundle != nullptr);
  CHECK((*table)[1].unloaded);
  CHECK((*table)[2].failure.has_value());
}

}  // namespace
}  // namespace ferry
