#include "hookhost/frontend/auth.h"

#include <doctest/doctest.h>

#include <memory>

namespace ferry::frontend {
namespace {

std::string Hex(const KeyDigest& d) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// Two tenants with a key each: acme may call mlp, globex every model; `bystander` is declared
// in [frontend] tenants only (no keys, no models).
struct Node {
  std::unique_ptr<shm::KeyTableData> table = std::make_unique<shm::KeyTableData>();
  NodeConfig config;
  explicit Node(bool required, uint32_t open = kOpenHealth) {
    config.frontend.tenants = {"bystander", "acme", "globex"};
    config.tenants = {{"acme", {"mlp"}, "/k/acme"}, {"globex", {"*"}, "/k/globex"}};
    config.auth.required = required;
    config.auth.open_endpoints = open;
    REQUIRE(shm::PublishKeys(*table, {{Sha256("acme-key"), 2}, {Sha256("globex-key"), 3}}).ok());
  }
};

std::string Bearer(std::string key) { return "Bearer " + key; }

TEST_CASE("SHA-256 is the standard digest") {
  CHECK(Hex(Sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("with auth required: no key 401, a wrong key 401, another's model 403, right 200") {
  Node node(true);
  Authenticator auth(node.table.get(), node.config);
  Result<uint32_t> none = auth.Check(nullptr, "", Endpoint::kInfer, "mlp");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == ErrorCode::kUnauthenticated);
  std::string wrong = Bearer("acme-kex");
  CHECK(auth.Check(&wrong, "", Endpoint::kInfer, "mlp").error().code ==
        ErrorCode::kUnauthenticated);
  CHECK(auth.Check(&wrong, "", Endpoint::kInfer, "mlp").error().message.find("acme-kex") ==
        std::string::npos);  // The key is never repeated.
  std::string acme = Bearer("acme-key");
  Result<uint32_t> other = auth.Check(&acme, "", Endpoint::kInfer, "cnn");
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code == ErrorCode::kPermissionDenied);
  CHECK(other.error().message == "tenant 'acme' may not call model 'cnn'");
  CHECK(auth.Check(&acme, "", Endpoint::kInfer, "mlp").value() == 2);
  std::string globex = Bearer("globex-key");
  CHECK(auth.Check(&globex, "", Endpoint::kInfer, "cnn").value() == 3);
  CHECK(auth.TenantName(3) == "globex");
  CHECK(auth.TenantName(0).empty());
  CHECK(auth.TenantName(99).empty());
}

TEST_CASE("open endpoints are served without a key; the others are not") {
  Node health_only(true);
  Authenticator a(health_only.table.get(), health_only.config);
  CHECK(a.Check(nullptr, "", Endpoint::kHealth, "mlp").value() == 0);
  CHECK_FALSE(a.Check(nullptr, "", Endpoint::kMetadata, "").ok());
  CHECK_FALSE(a.Check(nullptr, "", Endpoint::kStatistics, "").ok());
  Node open(true, kOpenHealth | kOpenMetadata | kOpenStatistics);
  Authenticator b(open.table.get(), open.config);
  CHECK(b.Check(nullptr, "", Endpoint::kMetadata, "cnn").ok());
  CHECK(b.Check(nullptr, "", Endpoint::kStatistics, "").ok());
  CHECK_FALSE(b.Check(nullptr, "", Endpoint::kInfer, "cnn").ok());  // Inference never is.
}

TEST_CASE("with auth off a request without a key is anonymous; a key is still checked") {
  Node node(false);
  Authenticator auth(node.table.get(), node.config);
  CHECK(auth.Check(nullptr, "", Endpoint::kInfer, "cnn").value() == 0);
  std::string wrong = Bearer("nope");
  CHECK(auth.Check(&wrong, "", Endpoint::kInfer, "cnn").error().code ==
        ErrorCode::kUnauthenticated);
  std::string acme = Bearer("acme-key");
  CHECK(auth.Check(&acme, "", Endpoint::kInfer, "cnn").error().code ==
        ErrorCode::kPermissionDenied);
  CHECK(auth.MaySee(0, "cnn"));
  CHECK_FALSE(auth.MaySee(2, "cnn"));
  CHECK(auth.MaySee(2, "mlp"));
  CHECK_FALSE(auth.MaySee(1, "mlp"));  // Declared without keys or models: nothing.
}

TEST_CASE("malformed Authorization values are refused, never matched") {
  Node node(true);
  Authenticator auth(node.table.get(), node.config);
  for (std::string value :
       {std::string("acme-key"), std::string("Basic acme-key"), std::string("Bearer"),
        std::string("Bearer "), std::string("Bearer    "), std::string("Bearer\tacme-key"),
        std::string("Bearer acme-key\n"), std::string("Bearer ") + std::string(5000, 'k'),
        std::string("Bearer acme-key", 14), std::string("\0Bearer acme-key", 16)}) {
    CAPTURE(value.size());
    Result<uint32_t> r = auth.Check(&value, "", Endpoint::kInfer, "mlp");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kUnauthenticated);
  }
  std::string lower = "bearer   acme-key  ";  // Scheme in any case; spaces around the key.
  CHECK(auth.Check(&lower, "", Endpoint::kInfer, "mlp").value() == 2);
}

TEST_CASE("keys published later are used at once; a table with a lying count is bounded") {
  Node node(true);
  Authenticator auth(node.table.get(), node.config);
  std::string fresh = Bearer("fresh-key");
  CHECK_FALSE(auth.Check(&fresh, "", Endpoint::kInfer, "mlp").ok());
  REQUIRE(shm::PublishKeys(*node.table, {{Sha256("fresh-key"), 2}}).ok());
  CHECK(auth.Check(&fresh, "", Endpoint::kInfer, "mlp").value() == 2);
  std::string old = Bearer("acme-key");  // Revoked by the new table.
  CHECK_FALSE(auth.Check(&old, "", Endpoint::kInfer, "mlp").ok());
  // A tenant number past the node's tenants matches nothing.
  REQUIRE(shm::PublishKeys(*node.table, {{Sha256("stray"), 40}}).ok());
  std::string stray = Bearer("stray");
  CHECK_FALSE(auth.Check(&stray, "", Endpoint::kInfer, "mlp").ok());
  REQUIRE(shm::PublishKeys(*node.table, {{Sha256("fresh-key"), 2}}).ok());
  node.table->count = 1u << 30;  // Read as kMaxKeys entries, not past the table.
  node.table->sequence.fetch_add(2);
  CHECK(auth.Check(&fresh, "", Endpoint::kInfer, "mlp").value() == 2);
  std::vector<shm::KeyEntry> too_many(shm::kMaxKeys + 1);
  CHECK_FALSE(shm::PublishKeys(*node.table, too_many).ok());
}

TEST_CASE("a client certificate's subject is its tenant when no key is sent") {
  Node node(true);
  node.config.tenants[0].tls_subjects = {"CN=alice,O=ferry tests"};
  Authenticator auth(node.table.get(), node.config);
  CHECK(auth.Check(nullptr, "CN=alice,O=ferry tests", Endpoint::kInfer, "mlp").value() == 2);
  // Its tenant's models only.
  CHECK(auth.Check(nullptr, "CN=alice,O=ferry tests", Endpoint::kInfer, "cnn").error().code ==
        ErrorCode::kPermissionDenied);
  // A subject no tenant lists is no one: 401 with auth required.
  CHECK(auth.Check(nullptr, "CN=mallory,O=ferry tests", Endpoint::kInfer, "mlp").error().code ==
        ErrorCode::kUnauthenticated);
  // Nor a prefix or a near match of a listed one.
  CHECK_FALSE(auth.Check(nullptr, "CN=alice", Endpoint::kInfer, "mlp").ok());
  CHECK_FALSE(auth.Check(nullptr, "CN=alice,O=ferry tests,", Endpoint::kInfer, "mlp").ok());
  // A key, when sent, decides.
  std::string globex = Bearer("globex-key");
  CHECK(auth.Check(&globex, "CN=alice,O=ferry tests", Endpoint::kInfer, "cnn").value() == 3);
  std::string wrong = Bearer("nope");
  CHECK(auth.Check(&wrong, "CN=alice,O=ferry tests", Endpoint::kInfer, "mlp").error().code ==
        ErrorCode::kUnauthenticated);
}

TEST_CASE("changing the node's settings needs an admin tenant under auth, anyone without") {
  Node node(true);
  node.config.tenants[1].admin = true;  // globex.
  Authenticator auth(node.table.get(), node.config);
  std::string acme = Bearer("acme-key");
  std::string globex = Bearer("globex-key");
  CHECK(auth.Check(nullptr, "", Endpoint::kAdmin, "").error().code == ErrorCode::kUnauthenticated);
  CHECK(auth.Check(&acme, "", Endpoint::kAdmin, "").error().code == ErrorCode::kPermissionDenied);
  CHECK(auth.Check(&globex, "", Endpoint::kAdmin, "").value() == 3);
  Node open(false);
  Authenticator anyone(open.table.get(), open.config);
  CHECK(anyone.Check(nullptr, "", Endpoint::kAdmin, "").value() == 0);
  // A wrong key is still wrong.
  std::string wrong = Bearer("nope");
  CHECK(anyone.Check(&wrong, "", Endpoint::kAdmin, "").error().code == ErrorCode::kUnauthenticated);
}

}  // namespace
}  // namespace ferry::frontend
