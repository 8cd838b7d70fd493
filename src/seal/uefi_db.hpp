#pragma once
// The Azure Compute Gallery image version whose UEFI db holds hpcbake's module-signing
// certificate: the request body of GalleryImageVersions_CreateOrUpdate (PUT .../galleries/G/
// images/I/versions/V?api-version=kGalleryApiVersion) with
// properties.securityProfile.uefiSettings.additionalSignatures.db = [{type: x509, value:
// [base64 DER]}] on top of the signature template kUefiSignatureTemplate. A VM made from that
// version with Secure Boot on has the certificate in its db, so kernels that trust the platform
// keyring for modules (the distro manifests' module_keyrings: Ubuntu's, RHEL's) load what it
// signed, with no MOK to enrol by hand on each VM.
// Sources: Azure/azure-rest-api-specs@65ee5e20b40a1cdce2af21ef7605ee4de10dd78f
// specification/compute/resource-manager/Microsoft.Compute/GalleryRP/stable/2025-03-03/GalleryRP.json
// (GalleryImageVersion, ImageVersionSecurityProfile, GalleryImageVersionUefiSettings,
// UefiKeySignatures, UefiKey; tests/fixtures/gallery/ holds the trimmed copy the body is
// validated against), and MicrosoftDocs/azure-compute-docs@8b668773ebaf579bc6f4ce084480a2174551daee
// articles/virtual-machines/trusted-launch-secure-boot-custom-uefi.md ("Scenario 2: Append keys
// to DB and DBX to a signature template"; the image definition must be of security type
// TrustedLaunchSupported or TrustedLaunchAndConfidentialVmSupported; REST API only).
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::seal {

// The latest stable GalleryRP API version (info.version of the GalleryRP.json above).
inline constexpr const char* kGalleryApiVersion = "2025-03-03";
// Keeps Microsoft's UEFI CA in db (it signs the shim every distro boots through) and appends ours.
inline constexpr const char* kUefiSignatureTemplate = "MicrosoftUefiCertificateAuthorityTemplate";

struct UefiDbRequest {
  std::filesystem::path cert;              // PEM or DER X.509 certificate (host path, as given)
  std::string source_id;                   // ARM id: a managed image, a gallery image version or a VM
  std::string location;                    // the image version's region
  std::vector<std::string> target_regions; // replication; empty: the location alone
};

// The body, or ErrorKind::usage naming what is wrong: a certificate OpenSSL cannot parse as
// X.509 (PEM or DER), a source that is not a Microsoft.Compute image, image version or VM id,
// an empty location, an empty or repeated target region.
Result<nlohmann::json> uefi_db_body(const UefiDbRequest& rq);

// Everything uefi_db_body checks but the certificate: the source, the location, the regions.
Status check_uefi_db_request(const UefiDbRequest& rq);

// The ARM source id check alone (usage error with the accepted forms).
Status check_source_id(std::string_view id);

} // namespace hpcbake::seal
