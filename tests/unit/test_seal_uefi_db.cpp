// seal/uefi_db: the gallery image version body with the module-signing certificate in its UEFI
// db. The certificate is a real one (tests/fixtures/mok-keys/platform-db, made by hpcbake's key
// generator); the body's schema check against the published API is tests/cli/test_cli_seal.py.
#include "seal/uefi_db.hpp"

#include "helpers.hpp"

#include "driver/mok.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>

#include <string>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

const std::string kImage = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Compute/images/hpcbake";

fs::path cert_file() {
  return test::fixtures() / "mok-keys" / "platform-db" / "signing.der";
}

std::string decode64(const std::string& text) {
  std::string out(text.size(), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  REQUIRE(n >= 0);
  out.resize(static_cast<std::size_t>(n));
  // EVP_DecodeBlock counts the '=' padding as zero bytes.
  for (auto pad = text.rbegin(); pad != text.rend() && *pad == '='; ++pad)
    out.pop_back();
  return out;
}

} // namespace

TEST_CASE("seal uefi db: the db entry is the certificate's DER, on top of Microsoft's UEFI CA template") {
  seal::UefiDbRequest rq{cert_file(), kImage, "eastus", {}};
  auto body = seal::uefi_db_body(rq);
  REQUIRE(body);
  auto cert = driver::read_certificate(cert_file());
  REQUIRE(cert);
  const auto& uefi = (*body)["properties"]["securityProfile"]["uefiSettings"];
  CHECK(uefi["signatureTemplateNames"] == nlohmann::json::array({"MicrosoftUefiCertificateAuthorityTemplate"}));
  REQUIRE(uefi["additionalSignatures"]["db"].size() == 1);
  CHECK(uefi["additionalSignatures"]["db"][0]["type"] == "x509");
  CHECK(decode64(uefi["additionalSignatures"]["db"][0]["value"][0].get<std::string>()) == cert->der);
  CHECK((*body)["location"] == "eastus");
  CHECK((*body)["properties"]["storageProfile"]["source"] == nlohmann::json{{"id", kImage}});
  CHECK((*body)["properties"]["publishingProfile"]["targetRegions"] ==
        nlohmann::json::array({nlohmann::json{{"name", "eastus"}}}));
}

TEST_CASE("seal uefi db: sources") {
  const std::string base = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Compute/";
  CHECK(seal::check_source_id(base + "images/x"));
  CHECK(seal::check_source_id(base + "galleries/g/images/i/versions/1.0.0"));
  CHECK(seal::check_source_id(base + "virtualMachines/vm"));
  CHECK(seal::check_source_id(
      "/SUBSCRIPTIONS/0/resourcegroups/rg/providers/microsoft.compute/images/x")); // ARM ids ignore case
  CHECK_FALSE(seal::check_source_id(base + "disks/d"));
  CHECK_FALSE(seal::check_source_id(base + "galleries/g/images/i")); // a definition, not a version
  CHECK_FALSE(seal::check_source_id("hpcbake-image"));
  CHECK_FALSE(seal::check_source_id(base + "images/x/extra"));
  seal::UefiDbRequest vm{cert_file(), base + "virtualMachines/vm", "eastus", {"eastus", "westus3"}};
  auto body = seal::uefi_db_body(vm);
  REQUIRE(body);
  CHECK((*body)["properties"]["storageProfile"]["source"] ==
        nlohmann::json{{"virtualMachineId", base + "virtualMachines/vm"}});
  CHECK((*body)["properties"]["publishingProfile"]["targetRegions"].size() == 2);
}

TEST_CASE("seal uefi db: refusals") {
  auto refused = [](seal::UefiDbRequest rq, const std::string& part) {
    auto body = seal::uefi_db_body(rq);
    REQUIRE_FALSE(body);
    CHECK(body.error().kind == ErrorKind::usage);
    CHECK(body.error().message.find(part) != std::string::npos);
    CHECK_FALSE(body.error().hint.empty());
  };
  refused({test::fixtures() / "mok-keys" / "platform-db" / "signing.key", kImage, "eastus", {}},
          "not a DER X.509 certificate");
  refused({cert_file(), kImage, "", {}}, "--location '' is not a region name");
  refused({cert_file(), kImage, "east us ", {}}, "is not a region name");
  refused({cert_file(), kImage, "eastus", {"eastus", "EASTUS"}}, "given twice");
  refused({cert_file(), "/subscriptions/0", "eastus", {}}, "--source-id");
}
