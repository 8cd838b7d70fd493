#pragma once
// The image SBOM `seal` writes beside image-manifest.json: an SPDX 2.3 JSON document
// (https://spdx.github.io/spdx-spec/v2.3/) of what hpcbake put into the image, made from the same
// record as the image manifest (the manifest JSON seal just built, and the stored plan), so a
// vulnerability scanner (Trivy, Grype: `trivy sbom FILE`) reads what the manifest says:
//   - the image (described by the document): the distro, the size, the next-boot kernel;
//   - each component (nvidia-cuda-driver, nvidia-fabricmanager, ...) the image CONTAINS, with its
//     version; each package the component installed (name, version, the package manager: a purl
//     pkg:deb/... or pkg:rpm/...), CONTAINS from the component, its hold in an annotation;
//   - each artifact a component was installed from (its URL as downloadLocation, its SHA-256):
//     the component is GENERATED_FROM it;
//   - each kernel module hpcbake built (path, SHA-256, vermagic) the image CONTAINS, its signer and
//     Secure Boot trust in an annotation;
//   - each repository hpcbake configured (its URI, the pinned signing key's fingerprint and where
//     the key and source file are, in an annotation), and Canonical's archive keys (fingerprints)
//     where the plan installs Canonical's signed NVIDIA modules.
#include "plan/plan.hpp"

#include <nlohmann/json.hpp>

namespace hpcbake::seal {

inline constexpr const char* kImageSbomPath = "/var/lib/hpcbake/image-sbom.spdx.json";

// The SBOM of `manifest` (seal's image manifest, schema kImageManifestSchema) for the plan `plan`
// it was sealed from. Deterministic: the same manifest and plan give the same document.
nlohmann::json image_sbom(const nlohmann::json& manifest, const plan::Plan& plan);

} // namespace hpcbake::seal
