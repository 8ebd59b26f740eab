#include "supervisor/tls_files.h"

#include "config/config_file.h"
#include "net/tls_context.h"

namespace ferry::supervisor {

Result<shm::TlsPems> ReadTlsFiles(const TlsSettings& tls) {
  shm::TlsPems pems;
  FERRY_ASSIGN_OR_RETURN(pems.cert_chain,
                         ReadConfigFile(tls.cert, "tls_cert", kMaxCertChainBytes, false));
  FERRY_ASSIGN_OR_RETURN(pems.key, ReadConfigFile(tls.key, "tls_key", kMaxKeyBytes, true));
  if (!tls.client_ca.empty()) {
    FERRY_ASSIGN_OR_RETURN(
        pems.client_ca, ReadConfigFile(tls.client_ca, "tls_client_ca", kMaxClientCaBytes, false));
  }
  Result<net::TlsContext> context =
      net::MakeServerContext({pems.cert_chain, pems.key, pems.client_ca});
  if (!context.ok()) {
    return InvalidArgument("[node.listen] TLS files (" + tls.cert + ", " + tls.key +
                           (tls.client_ca.empty() ? "" : ", " + tls.client_ca) +
                           "): " + context.error().message);
  }
  return pems;
}

}  // namespace ferry::supervisor
