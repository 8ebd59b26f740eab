#include "model/bundle.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/repository.h"
#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

bool Contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Copies an example bundle into `dir`/NAME, replacing `from` by `to` in its manifest.
std::string CopyExample(const testing::TempDir& dir, const std::string& example,
                        const std::string& from = "", const std::string& to = "") {
  std::string target = dir / example;
  std::filesystem::create_directories(target);
  std::filesystem::copy_file("examples/models/" + example + "/weights.safetensors",
                             target + "/weights.safetensors");
  std::string manifest = ReadAll("examples/models/" + example + "/manifest.toml");
  if (!from.empty()) {
    size_t at = manifest.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from);
    manifest.replace(at, from.size(), to);
  }
  testing::WriteFile(target + "/manifest.toml", manifest);
  return target;
}

std::string ErrorOf(const std::string& dir) {
  Result<Bundle> bundle = LoadBundle(dir);
  REQUIRE_FALSE(bundle.ok());
  return bundle.error().message;
}

TEST_CASE("the example bundles load and validate at every size and variant") {
  Result<Bundle> mlp = LoadBundle("examples/models/mlp");
  REQUIRE_MESSAGE(mlp.ok(), (mlp.ok() ? "" : mlp.error().message));
  CHECK(mlp->manifest.batch_sizes == std::vector<int64_t>{1, 4, 8, 16, 32});
  CHECK(mlp->weights.index().tensors.size() == 6);
  Result<Bundle> cnn = LoadBundle("examples/models/cnn/");
  REQUIRE_MESSAGE(cnn.ok(), (cnn.ok() ? "" : cnn.error().message));
  CHECK(cnn->manifest.variants.size() == 2);
  CHECK(cnn->manifest.variants[1].inputs.at("image") == Shape{-1, 3, 64, 64});
}

TEST_CASE("a weight of the wrong shape names the bundle, op index and tensor") {
  testing::TempDir dir;
  std::string bundle =
      CopyExample(dir, "mlp", "weight = \"fc2.weight\"", "weight = \"fc1.weight\"");
  std::string message = ErrorOf(bundle);
  CHECK(Contains(message, "bundle " + bundle));
  CHECK(Contains(message,
                 "op 2 (dense) tensor 'fc1.weight': weight shape [512, 784], expected "
                 "[512, 512]"));
}

TEST_CASE("a missing weight, a wrong output shape and a bad variant are each named") {
  testing::TempDir dir;
  CHECK(Contains(ErrorOf(CopyExample(dir, "mlp", "bias = \"fc3.bias\"", "bias = \"fc9.bias\"")),
                 "op 4 (dense) tensor 'fc9.bias': no such weight"));
  testing::TempDir dir2;
  CHECK(Contains(ErrorOf(CopyExample(dir2, "mlp", "shape = [-1, 10]", "shape = [-1, 11]")),
                 "output 'logits' is declared [1, 11] but the program produces [1, 10]"));
  testing::TempDir dir3;
  std::string message = ErrorOf(CopyExample(dir3, "cnn", "[-1, 3, 64, 64]", "[-1, 4, 64, 64]"));
  CHECK(Contains(message, "variant 'large', batch 1: op 0 (conv2d) tensor 'conv1.weight'"));
  testing::TempDir dir4;
  CHECK(Contains(ErrorOf(CopyExample(dir4, "cnn", "[-1, 3, 64, 64]", "[-1, 3, 2, 2]")),
                 "kernel 2 is larger than the padded input"));
}

TEST_CASE("bundle-level mistakes are named") {
  testing::TempDir dir;
  CHECK(Contains(ErrorOf(CopyExample(dir, "mlp", "name = \"mlp\"", "name = \"other\"")),
                 "name 'other' differs from the bundle directory 'mlp'"));
  testing::TempDir dir2;
  CHECK(Contains(ErrorOf(CopyExample(dir2, "mlp", "[[program]]",
                                     "[hooks]\nplugin = \"hook.so\"\n\n[[program]]")),
                 "hook plugin 'hook.so' is not a regular file inside the bundle"));
  CHECK(LoadBundle(dir / "nothing").error().code == ErrorCode::kNotFound);
  testing::TempDir dir3;
  std::string bundle = CopyExample(dir3, "mlp");
  std::filesystem::resize_file(bundle + "/weights.safetensors", 1000);
  CHECK(Contains(ErrorOf(bundle), "weights.safetensors: tensors cover"));
}

TEST_CASE("a pipeline bundle: manifest and plugin, no weights; the example ones load") {
  testing::TempDir dir;
  std::string target = dir / "image_pipeline";
  std::filesystem::create_directories(target);
  testing::WriteFile(target + "/manifest.toml", ReadAll("examples/pipelines/image_pipeline.toml"));
  CHECK(Contains(ErrorOf(target), "hook plugin 'image_classify.so' is not a regular file"));
  testing::WriteFile(target + "/image_classify.so", "");  // Loading it is the hook host's job.
  Result<Bundle> bundle = LoadBundle(target);
  REQUIRE_MESSAGE(bundle.ok(), (bundle.ok() ? "" : bundle.error().message));
  CHECK(bundle->manifest.pipeline());
  CHECK(bundle->weights.index().tensors.empty());
  CHECK(bundle->plugin_path == std::filesystem::canonical(target + "/image_classify.so").string());
  // The pipeline's two stages validate against the CNN's weights.
  for (const char* stage : {"cnn_features", "cnn_head"}) {
    CAPTURE(stage);
    std::string stage_dir = dir / stage;
    std::filesystem::create_directories(stage_dir);
    std::filesystem::copy_file("examples/models/cnn/weights.safetensors",
                               stage_dir + "/weights.safetensors");
    testing::WriteFile(stage_dir + "/manifest.toml",
                       ReadAll(std::string("examples/pipelines/") + stage + ".toml"));
    Result<Bundle> b = LoadBundle(stage_dir);
    CHECK_MESSAGE(b.ok(), (b.ok() ? "" : b.error().message));
  }
}

TEST_CASE("a repository's bundle is a directory inside it, symlinks resolved") {
  testing::TempDir dir;
  std::filesystem::create_directories(dir / "repo");
  std::filesystem::create_directories(dir / "elsewhere");
  namespace fs = std::filesystem;
  fs::copy("examples/models/mlp", dir / "repo/mlp", fs::copy_options::recursive);
  fs::copy("examples/models/cnn", dir / "elsewhere/cnn", fs::copy_options::recursive);
  fs::create_directory_symlink(dir / "elsewhere/cnn", dir / "repo/cnn");
  // A link inside the repository to one of its own bundles stays inside.
  fs::create_directory_symlink("mlp", dir / "repo/mlp2");

  CHECK(LoadRepositoryBundle(dir / "repo", "mlp").ok());
  Result<Bundle> out = LoadRepositoryBundle(dir / "repo", "cnn");
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().code == ErrorCode::kInvalidArgument);
  CHECK(Contains(out.error().message, "outside its place"));
  CHECK(LoadBundle(dir / "repo/cnn").ok());  // Only the repository rule refuses it.
  // The link to a sibling resolves to a directory inside, whose name differs from the link's:
  // the manifest's name check refuses it, not the repository rule.
  Result<Bundle> sibling = LoadRepositoryBundle(dir / "repo", "mlp2");
  REQUIRE_FALSE(sibling.ok());
  CHECK_FALSE(Contains(sibling.error().message, "outside its place"));
  CHECK(LoadRepositoryBundle(dir / "repo", "../elsewhere/cnn").error().code ==
        ErrorCode::kInvalidArgument);
  CHECK(LoadRepositoryBundle(dir / "repo", "gone").error().code == ErrorCode::kNotFound);

  // The repository's table keeps the refused bundle's index, marked failed.
  Result<std::vector<RepositoryModel>> table = LoadRepository(dir / "repo");
  REQUIRE(table.ok());
  REQUIRE(table->size() == 3);
  CHECK((*table)[0].name == "cnn");
  CHECK((*table)[0].bundle == nullptr);
  CHECK((*table)[0].failure.has_value());
  CHECK((*table)[1].bundle != nullptr);
}

}  // namespace
}  // namespace ferry
