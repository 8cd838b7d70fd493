#include "seal/uefi_db.hpp"

#include "driver/mok.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <regex>

namespace hpcbake::seal {

namespace {

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
  return out;
}

// A region name as the API takes it ("eastus", "West US"): letters, digits and spaces.
bool region_name(std::string_view s) {
  if (s.empty() || s.front() == ' ' || s.back() == ' ') return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == ' '; });
}

bool is_vm(std::string_view id) {
  return util::to_lower(id).find("/providers/microsoft.compute/virtualmachines/") != std::string::npos;
}

} // namespace

Status check_source_id(std::string_view id) {
  // GalleryArtifactVersionFullSource: `id` (a managed image, or another gallery image version)
  // or `virtualMachineId` (capturing a VM).
  static const std::regex form(R"(^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/)"
                               R"((images/[^/]+|galleries/[^/]+/images/[^/]+/versions/[^/]+|virtualMachines/[^/]+)$)",
                               std::regex::icase);
  if (std::regex_match(std::string(id), form)) return {};
  return fail(ErrorKind::usage,
              fmt::format("--source-id '{}' is not the id of a managed image, a gallery image version "
                          "or a virtual machine",
                          id),
              "give the full ARM id: /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/images/NAME, "
              ".../galleries/G/images/I/versions/V or .../virtualMachines/NAME ('az image show --query id')");
}

namespace {

std::vector<std::string> regions_of(const UefiDbRequest& rq) {
  return rq.target_regions.empty() ? std::vector<std::string>{rq.location} : rq.target_regions;
}

} // namespace

Status check_uefi_db_request(const UefiDbRequest& rq) {
  HPCBAKE_TRY(check_source_id(rq.source_id));
  if (!region_name(rq.location))
    return fail(ErrorKind::usage, fmt::format("--location '{}' is not a region name", rq.location),
                "give the region of the image version, as 'az account list-locations --query [].name' prints it "
                "(eastus)");
  const auto regions = regions_of(rq);
  for (std::size_t i = 0; i < regions.size(); ++i) {
    if (!region_name(regions[i]))
      return fail(ErrorKind::usage, fmt::format("--target-region '{}' is not a region name", regions[i]),
                  "give each replication region once, as 'az account list-locations --query [].name' prints it");
    for (std::size_t j = 0; j < i; ++j)
      if (util::iequals(regions[i], regions[j]))
        return fail(ErrorKind::usage, fmt::format("--target-region '{}' is given twice", regions[i]),
                    "give each replication region once");
  }
  return {};
}

Result<nlohmann::json> uefi_db_body(const UefiDbRequest& rq) {
  HPCBAKE_TRY(check_uefi_db_request(rq));
  auto cert = driver::read_certificate(rq.cert);
  if (!cert)
    return fail(ErrorKind::usage, fmt::format("the certificate for the image's UEFI db: {}", cert.error().message),
                "give the X.509 certificate (PEM or DER) whose key signed the modules: the install key directory's "
                "signing.der, or the --sign-cert the install was given (--cert FILE)");
  nlohmann::json targets = nlohmann::json::array();
  for (const auto& region : regions_of(rq))
    targets.push_back({{"name", region}});
  nlohmann::json source = {{is_vm(rq.source_id) ? "virtualMachineId" : "id", rq.source_id}};
  nlohmann::json db =
      nlohmann::json::array({{{"type", "x509"}, {"value", nlohmann::json::array({base64(cert->der)})}}});
  return nlohmann::json{{"location", rq.location},
                        {"properties",
                         {{"publishingProfile", {{"targetRegions", targets}}},
                          {"storageProfile", {{"source", source}}},
                          {"securityProfile",
                           {{"uefiSettings",
                             {{"signatureTemplateNames", nlohmann::json::array({kUefiSignatureTemplate})},
                              {"additionalSignatures", {{"db", db}}}}}}}}}};
}

} // namespace hpcbake::seal
