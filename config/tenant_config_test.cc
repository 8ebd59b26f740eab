#include "config/tenant_config.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/node_config.h"

namespace ferry {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/ferry-keys-XXXXXX";
    path = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string Write(const std::string& file, const std::string& text, mode_t mode = 0600) {
    std::string p = path + "/" + file;
    std::ofstream(p) << text;
    chmod(p.c_str(), mode);
    return p;
  }
};

const std::string kDigest = "sha256:" + std::string(64, 'a');

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("a keys file holds digests, comments and blank lines") {
  TempDir dir;
  std::string p = dir.Write(
      "k", "# acme's keys\n\n" + kDigest + "\r\nsha256:" + std::string(62, 'F') + "0e  \n");
  Result<std::vector<KeyDigest>> keys = ReadKeysFile(p);
  REQUIRE(keys.ok());
  REQUIRE(keys->size() == 2);
  CHECK((*keys)[0][0] == 0xaa);
  CHECK((*keys)[1][0] == 0xff);
  CHECK((*keys)[1][31] == 0x0e);
}

TEST_CASE("hostile keys files are refused naming the file and line, never the text") {
  TempDir dir;
  CHECK(Contains(ReadKeysFile(dir.Write("loose", kDigest + "\n", 0644)).error().message,
                 "mode 0644"));
  CHECK(Contains(ReadKeysFile(dir.Write("group", kDigest + "\n", 0640)).error().message,
                 "chmod 600"));
  Result<std::vector<KeyDigest>> raw = ReadKeysFile(dir.Write("raw", "my-secret-key\n"));
  REQUIRE_FALSE(raw.ok());
  CHECK(Contains(raw.error().message, "raw:1"));
  CHECK_FALSE(Contains(raw.error().message, "my-secret-key"));
  CHECK_FALSE(ReadKeysFile(dir.Write("short", "sha256:abcd\n")).ok());
  CHECK_FALSE(ReadKeysFile(dir.Write("nothex", "sha256:" + std::string(64, 'g') + "\n")).ok());
  CHECK_FALSE(ReadKeysFile(dir.Write("md5", "md5:" + std::string(32, 'a') + "\n")).ok());
  std::string big(kMaxKeysFileBytes + 1, '#');
  CHECK(Contains(ReadKeysFile(dir.Write("big", big)).error().message, "larger than"));
  std::string many;
  for (size_t i = 0; i <= kMaxKeysPerFile; ++i) {
    many += kDigest + "\n";
  }
  CHECK(Contains(ReadKeysFile(dir.Write("many", many)).error().message, "more than 4096"));
  std::string fifo = dir.path + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(Contains(ReadKeysFile(fifo).error().message, "not a regular file"));  // No hang.
  std::string target = dir.Write("target", kDigest + "\n");
  std::filesystem::create_symlink(target, dir.path + "/link");
  CHECK_FALSE(ReadKeysFile(dir.path + "/link").ok());
  CHECK_FALSE(ReadKeysFile(dir.path + "/absent").ok());
  CHECK_FALSE(ReadKeysFile(dir.path).ok());  // A directory.
  CHECK(ReadKeysFile(dir.Write("empty", "")).value().empty());
}

Result<NodeConfig> Parse(const std::string& text) {
  return ParseNodeConfig(text, "node.toml", "/etc/ferry", {});
}

TEST_CASE("[tenants.NAME] and [auth] are read, numbered after [frontend] tenants") {
  Result<NodeConfig> c = Parse(
      "[frontend]\ntenants = [\"ops\"]\n"
      "[auth]\nrequired = true\nopen_endpoints = [\"health\", \"statistics\"]\n"
      "[tenants.acme]\nmodels = [\"mlp\", \"cnn\"]\nkeys_file = \"keys/acme\"\n"
      "[tenants.globex]\nmodels = [\"*\"]\nkeys_file = \"/srv/globex.keys\"\nweight = 2.5\n");
  REQUIRE(c.ok());
  CHECK(c->frontend.tenants == std::vector<std::string>{"ops", "acme", "globex"});
  REQUIRE(c->tenants.size() == 2);
  CHECK(c->tenants[0].keys_file == "/etc/ferry/keys/acme");
  CHECK(c->tenants[0].MayCall("cnn"));
  CHECK_FALSE(c->tenants[0].MayCall("bert"));
  CHECK(c->tenants[1].MayCall("bert"));
  // Weights reach the scheduler by tenant number: ops is 1, acme 2, globex 3.
  CHECK(c->tenants[0].weight == 1.0);
  CHECK(c->scheduler.tenant_weights == std::map<uint32_t, double>{{2, 1.0}, {3, 2.5}});
  CHECK(c->auth.required);
  CHECK(c->node.tls == TlsSettings{});
  CHECK(c->auth.open_endpoints == (kOpenHealth | kOpenStatistics));
  CHECK_FALSE(Parse("").value().auth.required);
  CHECK(Parse("").value().auth.open_endpoints == kOpenHealth);
}

TEST_CASE("[priorities.NAME] names levels and their max waits") {
  Result<NodeConfig> c = Parse(
      "[priorities.interactive]\nlevel = 1\nmax_wait_ms = 50\n"
      "[priorities.background]\nlevel = 3\n");
  REQUIRE(c.ok());
  CHECK(c->scheduler.priority_names[1] == "interactive");
  CHECK(c->scheduler.priority_names[3] == "background");
  CHECK(c->scheduler.max_wait_seconds[1] == 0.05);
  CHECK(c->scheduler.max_wait_seconds[2] == 0);
  CHECK(c->scheduler.max_wait_seconds[3] == 0);
  auto error = [](const std::string& text) {
    Result<NodeConfig> r = Parse(text);
    return r.ok() ? std::string() : r.error().message;
  };
  CHECK(Contains(error("[priorities.a]\nlevel = 1\n[priorities.b]\nlevel = 1\n"),
                 "already class 'a'"));
  CHECK(Contains(error("[priorities.a]\nlevel = 4\n"), "level"));
  CHECK(Contains(error("[priorities.a]\nmax_wait_ms = 5\n"), "missing"));
  CHECK(Contains(error("[priorities.a]\nlevel = 2\nmax_wait_ms = 0\n"), "max_wait_ms"));
  CHECK(Contains(error("[priorities.a]\nlevel = 2\ndeadline = 3\n"), "deadline"));
}

TEST_CASE("tenant and auth mistakes are errors") {
  auto error = [](const std::string& text) {
    Result<NodeConfig> c = Parse(text);
    return c.ok() ? std::string() : c.error().message;
  };
  CHECK(Contains(error("[tenants.acme]\nkeys_file = \"k\"\n"), "models"));
  CHECK(Contains(error("[tenants.acme]\nmodels = [\"*\", \"mlp\"]\n"), "stands alone"));
  CHECK(Contains(error("[tenants.acme]\nmodels = [\"a b\"]\n"), "not a model name"));
  CHECK(Contains(error("[tenants.acme]\nmodels = [\"*\"]\nweight = 0\n"), "weight"));
  CHECK(Contains(error("[tenants.acme]\nmodels = [\"*\"]\nweight = -2\n"), "weight"));
  CHECK(Contains(error("[tenants.acme]\nmodels = [\"*\"]\nweight = \"2\"\n"), "weight"));
  CHECK(Contains(error("[tenants.acme]\nmodels = [\"*\"]\nweight = nan\n"), "weight"));
  CHECK(Contains(error("[tenants.\"a b\"]\nmodels = [\"*\"]\n"), "not a tenant name"));
  CHECK(Contains(error("[auth]\nrequired = true\n"), "no [tenants.NAME] has a keys_file"));
  CHECK(Contains(error("[auth]\nopen_endpoints = [\"infer\"]\n"), "unknown endpoint class"));
  CHECK(Contains(error("[tenants.a]\nmodels = [\"*\"]\ntls_subjects = [\"CN=x\"]\n"
                       "[tenants.b]\nmodels = [\"*\"]\ntls_subjects = [\"CN=y\", \"CN=x\"]\n"),
                 "'CN=x' is also tenant 'a'"));
  CHECK(Contains(error("[tenants.a]\nmodels = [\"*\"]\ntls_subjects = [\"\"]\n"), "1 to 1024"));
  // Subjects authenticate only over mutual TLS: without a client CA they serve no one.
  CHECK(Contains(error("[auth]\nrequired = true\n[tenants.a]\nmodels = [\"*\"]\n"
                       "tls_subjects = [\"CN=x\"]\n"),
                 "tls_client_ca"));
  CHECK(Contains(error("[node.listen]\ntls_cert = \"c.pem\"\n"), "go together"));
  CHECK(Contains(error("[node.listen]\ntls_key = \"k.pem\"\n"), "go together"));
  CHECK(Contains(error("[node.listen]\ntls_client_ca = \"ca.pem\"\n"), "mutual TLS is TLS"));
  std::string many = "[frontend]\ntenants = [";
  for (int i = 0; i < 16; ++i) {
    many += (i ? ", " : "") + std::string("\"t") + std::to_string(i) + "\"";
  }
  CHECK(Contains(error(many + "]\n[tenants.extra]\nmodels = [\"*\"]\n"), "at most 16"));
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST_CASE("[node.listen] TLS files and tls_subjects are read; mutual TLS can be the credential") {
  Result<NodeConfig> c = ParseNodeConfig(
      "[node.listen]\ntls_cert = \"tls/cert.pem\"\ntls_key = \"/k/key.pem\"\n"
      "tls_client_ca = \"tls/ca.pem\"\n"
      "[auth]\nrequired = true\n"
      "[tenants.acme]\nmodels = [\"*\"]\ntls_subjects = [\"CN=alice,O=ferry tests\"]\n",
      "node.toml", "/etc/ferry", {});
  REQUIRE(c.ok());
  CHECK(c->node.tls.cert == "/etc/ferry/tls/cert.pem");
  CHECK(c->node.tls.key == "/k/key.pem");
  CHECK(c->node.tls.client_ca == "/etc/ferry/tls/ca.pem");
  CHECK(c->node.tls.enabled());
  CHECK(c->tenants[0].tls_subjects == std::vector<std::string>{"CN=alice,O=ferry tests"});
}

TEST_CASE("[tenants.NAME] max_queued, rate and burst") {
  auto parse = [](const std::string& extra) {
    return ParseNodeConfig("[tenants.acme]\nmodels = [\"*\"]\n" + extra, "node.toml", "/etc/ferry",
                           {});
  };
  Result<NodeConfig> c = parse("max_queued = 64\nrate = 250\n");
  REQUIRE(c.ok());
  CHECK(c->tenants[0].max_queued == 64);
  CHECK(c->tenants[0].rate == 250);
  CHECK(c->tenants[0].burst == 250);  // One second's worth by default.
  CHECK(parse("rate = 0.5\n")->tenants[0].burst == 1);
  CHECK(parse("rate = 10\nburst = 3\n")->tenants[0].burst == 3);
  CHECK(parse("")->tenants[0].max_queued == 0);
  CHECK(parse("")->tenants[0].rate == 0);
  auto error = [&](const std::string& extra) {
    Result<NodeConfig> r = parse(extra);
    return r.ok() ? std::string() : r.error().message;
  };
  CHECK(Contains(error("max_queued = 0\n"), "max_queued"));
  CHECK(Contains(error("rate = 0\n"), "rate"));
  CHECK(Contains(error("rate = -1\n"), "rate"));
  CHECK(Contains(error("burst = 5\n"), "needs rate"));
  CHECK(Contains(error("rate = 5\nburst = 0.5\n"), "burst"));
}

}  // namespace
}  // namespace ferry
