// The TLS store: published text read back by a read-only mapping, sizes that lie clamped,
// nothing read before the first publication, the size limit.
#include "shm/tls_store.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>

#include "tests/testing/shm_name.h"

namespace ferry::shm {
namespace {

TEST_CASE("the TLS store carries the PEM text to a read-only reader") {
  std::string segment = testing::UniqueShmName("tls");
  Result<TlsStore> writer = TlsStore::Create(segment);
  REQUIRE(writer.ok());
  Result<TlsStore> reader = TlsStore::Open(segment);
  REQUIRE(reader.ok());
  CHECK(reader->Read().error().code == ErrorCode::kUnavailable);  // Nothing published yet.
  REQUIRE(writer->Publish({"CERT", "KEY", "CA"}).ok());
  Result<TlsPems> read = reader->Read();
  REQUIRE(read.ok());
  CHECK(read->cert_chain == "CERT");
  CHECK(read->key == "KEY");
  CHECK(read->client_ca == "CA");
  uint64_t first = reader->sequence();
  CHECK(read->sequence == first);
  REQUIRE(writer->Publish({"CERT2", "KEY2", ""}).ok());
  CHECK(reader->sequence() > first);
  CHECK(reader->Read()->cert_chain == "CERT2");
  CHECK(reader->Read()->client_ca.empty());
  // Too large: refused, and the last text stays.
  CHECK(writer->Publish({std::string(kMaxTlsBytes, 'x'), "k", ""}).error().code ==
        ErrorCode::kInvalidArgument);
  CHECK(reader->Read()->key == "KEY2");
  TlsStore::Remove(segment);
  CHECK(TlsStore::Open(segment).error().code == ErrorCode::kNotFound);
}

TEST_CASE("sizes that lie are clamped to the store") {
  std::string segment = testing::UniqueShmName("tls-lie");
  Result<TlsStore> writer = TlsStore::Create(segment);
  REQUIRE(writer.ok());
  REQUIRE(writer->Publish({"a", "b", "c"}).ok());
  // A second read-write mapping scribbles sizes past the text.
  namespace bip = boost::interprocess;
  bip::shared_memory_object object(bip::open_only, TlsStore::ObjectName(segment).c_str(),
                                   bip::read_write);
  bip::mapped_region region(object, bip::read_write);
  auto* data = static_cast<TlsStoreData*>(region.get_address());
  data->cert_bytes = 0xFFFFFFFF;
  data->key_bytes = 0xFFFFFFFF;
  data->ca_bytes = 7;
  Result<TlsStore> reader = TlsStore::Open(segment);
  REQUIRE(reader.ok());
  Result<TlsPems> read = reader->Read();
  REQUIRE(read.ok());
  CHECK(read->cert_chain.size() == kMaxTlsBytes);  // Garbage for OpenSSL, never past the end.
  CHECK(read->key.empty());
  CHECK(read->client_ca.empty());
  TlsStore::Remove(segment);
}

}  // namespace
}  // namespace ferry::shm
