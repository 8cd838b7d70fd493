// seal/sbom.hpp: the image SBOM made from an image manifest and its plan.
#include "seal/sbom.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace hpcbake;
using nlohmann::json;

namespace {

plan::Plan dnf_plan() {
  plan::Plan p;
  p.size = "Standard_ND96isr_H100_v5";
  p.distro_id = "almalinux-9";
  p.package_manager = manifest::PackageManager::dnf;
  plan::RepositoryStep r;
  r.repository = "cuda-rhel9";
  r.manager = manifest::PackageManager::dnf;
  r.uri = "https://repo.example/cuda/rhel9/x86_64";
  r.fingerprint = "ABCDEF0123456789ABCDEF0123456789ABCDEF01";
  r.key_path = "/etc/pki/rpm-gpg/hpcbake-cuda-rhel9.asc";
  r.source_path = "/etc/yum.repos.d/hpcbake-cuda-rhel9.repo";
  plan::Step s;
  s.id = "repository:cuda-rhel9";
  s.action = r;
  p.steps.push_back(s);
  return p;
}

json manifest_doc() {
  return json::parse(R"({
    "schema": 5, "created_at": 1764288000, "hpcbake_version": "1.2.3",
    "plan": {"path": "/var/lib/hpcbake/plan.json", "sha256": "aa"},
    "kernel": {"next_boot": "5.14.0-503.el9.x86_64"},
    "components": [
      {"component": "nvidia-fabricmanager", "version": "580.126.16",
       "artifacts": [{"name": "fm.tar.xz", "sha256": "0123", "size": 5, "url": "https://dl.example/fm.tar.xz",
                      "verified_in_cache": true}],
       "packages": [{"name": "nvidia-fabric-manager", "version": "1:580.126.16-1.el9", "held": true},
                    {"name": "not-installed", "version": "", "held": false}]}],
    "modules": [
      {"kernel": "5.14.0-503.el9.x86_64", "name": "nvidia", "path": "/lib/modules/k/extra/nvidia.ko.xz",
       "vermagic": "5.14.0-503.el9.x86_64 SMP mod_unload", "signer": "", "secure_boot_trust": null, "sha256": "beef"}]
  })");
}

const json* find(const json& doc, const std::string& name) {
  for (const auto& p : doc["packages"])
    if (p["name"] == name) return &p;
  return nullptr;
}

} // namespace

TEST_CASE("seal sbom: rpm purls, unsigned modules, repository fingerprints, and the same document twice") {
  const auto plan = dnf_plan();
  const auto doc = seal::image_sbom(manifest_doc(), plan);
  CHECK(doc == seal::image_sbom(manifest_doc(), plan));
  CHECK(doc["spdxVersion"] == "SPDX-2.3");
  CHECK(doc["creationInfo"]["created"] == "2025-11-28T00:00:00Z");
  CHECK(doc["creationInfo"]["creators"] == json::array({"Tool: hpcbake-1.2.3"}));

  const json* fm = find(doc, "nvidia-fabric-manager");
  REQUIRE(fm);
  // '+' and ':' percent-encoded (purl-spec); the rpm type, the distro's namespace.
  CHECK((*fm)["externalRefs"][0]["referenceLocator"] ==
        "pkg:rpm/almalinux/nvidia-fabric-manager@1%3A580.126.16-1.el9?distro=almalinux-9");
  CHECK((*fm)["annotations"][0]["comment"] == "package manager dnf; held at this version");
  // A package with no installed version has no purl (nothing to match), and no versionInfo.
  const json* missing = find(doc, "not-installed");
  REQUIRE(missing);
  CHECK_FALSE(missing->contains("externalRefs"));
  CHECK_FALSE(missing->contains("versionInfo"));

  const json* art = find(doc, "fm.tar.xz");
  REQUIRE(art);
  CHECK((*art)["downloadLocation"] == "https://dl.example/fm.tar.xz");
  CHECK((*art)["checksums"][0] == json{{"algorithm", "SHA256"}, {"checksumValue", "0123"}});

  const json* mod = find(doc, "nvidia");
  REQUIRE(mod);
  CHECK((*mod)["packageFileName"] == "/lib/modules/k/extra/nvidia.ko.xz");
  CHECK((*mod)["annotations"][0]["comment"] ==
        "kernel module for 5.14.0-503.el9.x86_64 (vermagic 5.14.0-503.el9.x86_64 SMP mod_unload); signer: unsigned");

  const json* repo = find(doc, "cuda-rhel9");
  REQUIRE(repo);
  CHECK((*repo)["downloadLocation"] == "https://repo.example/cuda/rhel9/x86_64");
  CHECK((*repo)["annotations"][0]["comment"].get<std::string>().find(
            "fingerprint ABCDEF0123456789ABCDEF0123456789ABCDEF01") != std::string::npos);

  // Every relationship names elements of the document.
  for (const auto& r : doc["relationships"]) {
    if (r["spdxElementId"] == "SPDXRef-DOCUMENT") continue;
    bool found = false;
    for (const auto& p : doc["packages"])
      found = found || p["SPDXID"] == r["relatedSpdxElement"];
    CHECK_MESSAGE(found, r.dump());
  }
}
