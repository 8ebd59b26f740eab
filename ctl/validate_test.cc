#include "ctl/validate.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "tests/testing/temp_dir.h"

namespace ferry {
namespace {

TEST_CASE("validate prints one OK line per valid item and exits 0") {
  std::ostringstream out, err;
  int code = RunValidate({"examples/node.toml", "examples/models/mlp", "examples/models/cnn"}, {},
                         out, err);
  CHECK_MESSAGE(code == 0, err.str());
  std::string text = out.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
  CHECK(text.find("OK node file examples/node.toml (node 'example', 2 CPU workers") == 0);
  CHECK(text.find("OK bundle examples/models/cnn (cnn v1, 2 variant(s)") != std::string::npos);
  CHECK(err.str().empty());
}

TEST_CASE("validate reports every error of every bad item and exits 2") {
  testing::TempDir dir;
  testing::WriteFile(dir / "node.toml", "[scheduler]\nbogus = 1\ncost_ema_alpha = 9\n");
  testing::WriteFile(dir / "empty/readme", "not a bundle");
  std::ostringstream out, err;
  int code =
      RunValidate({dir / "node.toml", "examples/models/mlp", dir / "empty", dir / "missing.toml"},
                  {}, out, err);
  CHECK(code == 2);
  CHECK(out.str().find("OK bundle examples/models/mlp") == 0);
  std::string text = err.str();
  CHECK(text.find("scheduler.bogus: unknown key") != std::string::npos);
  CHECK(text.find("scheduler.cost_ema_alpha: must be in (0, 1]") != std::string::npos);
  CHECK(text.find("empty/manifest.toml: no such file") != std::string::npos);
  CHECK(text.find("missing.toml: no such file") != std::string::npos);
}

TEST_CASE("a node file naming a model with no bundle in the repository is invalid") {
  testing::TempDir dir;
  testing::WriteFile(dir / "models/.keep", "");
  testing::WriteFile(dir / "node.toml",
                     "[node]\nmodel_repository = \"models\"\n[scheduler.models.ghost]\n");
  std::ostringstream out, err;
  CHECK(RunValidate({dir / "node.toml"}, {}, out, err) == 2);
  CHECK(err.str().find("scheduler.models.ghost: no bundle 'ghost'") != std::string::npos);
  testing::WriteFile(dir / "norepo.toml", "[node]\nmodel_repository = \"nowhere\"\n");
  CHECK(RunValidate({dir / "norepo.toml"}, {}, out, err) == 2);
  CHECK(err.str().find("is not a directory") != std::string::npos);
}

TEST_CASE("environment overrides are validated too") {
  std::ostringstream out, err;
  CHECK(RunValidate({"examples/node.toml"}, {{"FERRY_SCHEDULER_DISCIPLINE", "sjf"}}, out, err) ==
        2);
  CHECK(err.str().find("environment FERRY_SCHEDULER_DISCIPLINE") != std::string::npos);
}

}  // namespace
}  // namespace ferry
