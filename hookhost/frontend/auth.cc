#include "hookhost/frontend/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

namespace ferry::frontend {
namespace {

// The longest key accepted: longer is no key this node could have issued.
constexpr size_t kMaxKeyBytes = 4096;

// "Bearer KEY" (the scheme in any case, RFC 7235), the key; empty when it is not that.
std::string_view BearerKey(std::string_view value) {
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() + 1) {
    return {};
  }
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != kScheme[i]) {
      return {};
    }
  }
  if (value[kScheme.size()] != ' ') {
    return {};
  }
  std::string_view key = value.substr(kScheme.size() + 1);
  while (!key.empty() && key.front() == ' ') {
    key.remove_prefix(1);
  }
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) {
    key.remove_suffix(1);
  }
  return key.size() <= kMaxKeyBytes ? key : std::string_view();
}

}  // namespace

KeyDigest Sha256(std::string_view data) {
  KeyDigest digest{};
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != digest.size()) {
    digest.fill(0);  // Matches no stored digest unless one is all zeros: refuse those too.
  }
  return digest;
}

Authenticator::Authenticator(const shm::KeyTableData* table, const NodeConfig& config)
    : table_(table), auth_(config.auth), names_(config.frontend.tenants), tenants_(config.tenants) {
  by_number_.assign(names_.size(), nullptr);
  for (const TenantSettings& t : tenants_) {
    auto it = std::find(names_.begin(), names_.end(), t.name);
    if (it != names_.end()) {
      by_number_[static_cast<size_t>(it - names_.begin())] = &t;
      for (const std::string& subject : t.tls_subjects) {
        by_subject_[subject] = static_cast<uint32_t>(it - names_.begin()) + 1;
      }
    }
  }
}

std::shared_ptr<const shm::KeySnapshot> Authenticator::Keys() const {
  uint64_t sequence = shm::KeysSequence(*table_);
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_ == nullptr || keys_->sequence != sequence) {
    Result<shm::KeySnapshot> read = shm::ReadKeys(*table_);
    if (read.ok()) {
      keys_ = std::make_shared<const shm::KeySnapshot>(std::move(*read));
    }
  }
  return keys_;  // Null (no key valid) only when no table could ever be read.
}

uint32_t Authenticator::TenantOfKey(std::string_view key) const {
  KeyDigest digest = Sha256(key);
  static constexpr KeyDigest kZero{};
  std::shared_ptr<const shm::KeySnapshot> keys = Keys();
  if (keys == nullptr || digest == kZero) {
    return 0;
  }
  uint32_t tenant = 0;
  for (const shm::KeyEntry& entry : keys->keys) {
    // All ones when equal, else zero: no branch on the comparison.
    uint32_t equal = static_cast<uint32_t>(
        CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0);
    tenant |= entry.tenant & (0u - equal);
  }
  return tenant <= names_.size() ? tenant : 0;
}

bool Authenticator::Open(Endpoint endpoint) const {
  switch (endpoint) {
    case Endpoint::kHealth:
      return (auth_.open_endpoints & kOpenHealth) != 0;
    case Endpoint::kMetadata:
      return (auth_.open_endpoints & kOpenMetadata) != 0;
    case Endpoint::kStatistics:
      return (auth_.open_endpoints & kOpenStatistics) != 0;
    case Endpoint::kInfer:
    case Endpoint::kAdmin:
      return false;
  }
  return false;
}

Result<uint32_t> Authenticator::Check(const std::string* authorization,
                                      std::string_view tls_subject, Endpoint endpoint,
                                      std::string_view model) const {
  FERRY_ASSIGN_OR_RETURN(uint32_t tenant, Identify(authorization, tls_subject, endpoint, model));
  if (endpoint == Endpoint::kAdmin && auth_.required) {
    const TenantSettings* t =
        tenant >= 1 && tenant <= by_number_.size() ? by_number_[tenant - 1] : nullptr;
    if (t == nullptr || !t->admin) {
      return PermissionDenied(
          "changing the node's settings needs an admin tenant ([tenants.NAME] "
          "admin = true)");
    }
  }
  return tenant;
}

Result<uint32_t> Authenticator::Identify(const std::string* authorization,
                                         std::string_view tls_subject, Endpoint endpoint,
                                         std::string_view model) const {
  auto by_certificate = tls_subject.empty() ? by_subject_.end() : by_subject_.find(tls_subject);
  if (authorization == nullptr && by_certificate != by_subject_.end()) {
    uint32_t tenant = by_certificate->second;
    if (!model.empty() && !MaySee(tenant, model)) {
      return PermissionDenied("tenant '" + names_[tenant - 1] + "' may not call model '" +
                              std::string(model.substr(0, 128)) + "'");
    }
    return tenant;
  }
  if (authorization == nullptr) {
    if (!auth_.required || Open(endpoint)) {
      return uint32_t{0};
    }
    return Unauthenticated(
        "this node requires an API key: send it as \"Authorization: Bearer KEY\" (gRPC: "
        "\"authorization\" metadata)");
  }
  std::string_view key = BearerKey(*authorization);
  uint32_t tenant = key.empty() ? 0 : TenantOfKey(key);
  if (tenant == 0) {
    return Unauthenticated(key.empty() ? "the Authorization value is not \"Bearer KEY\""
                                       : "the API key is not valid");
  }
  if (!model.empty() && !MaySee(tenant, model)) {
    return PermissionDenied("tenant '" + names_[tenant - 1] + "' may not call model '" +
                            std::string(model.substr(0, 128)) + "'");
  }
  return tenant;
}

bool Authenticator::MaySee(uint32_t tenant, std::string_view model) const {
  if (tenant == 0) {
    return !auth_.required || (auth_.open_endpoints & kOpenMetadata) != 0;
  }
  const TenantSettings* t = tenant <= by_number_.size() ? by_number_[tenant - 1] : nullptr;
  return t != nullptr && t->MayCall(model);
}

std::string Authenticator::TenantName(uint32_t tenant) const {
  return tenant >= 1 && tenant <= names_.size() ? names_[tenant - 1] : std::string();
}

}  // namespace ferry::frontend
