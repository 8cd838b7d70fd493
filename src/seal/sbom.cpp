#include "seal/sbom.hpp"

#include "manifest/manifests.hpp"
#include "util/clock.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>

#include <cctype>
#include <set>
#include <string>

namespace hpcbake::seal {

using json = nlohmann::json;

namespace {

// SPDX 2.3 (spdx/spdx-spec@aadf3b0b8dbbabdb4d880b0fc714255fea436ff7 schemas/spdx-schema.json, tag
// v2.3): an SPDXID is "SPDXRef-" then letters, digits, '.' and '-'.
std::string id_part(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '-';
  return out;
}

// purl (github.com/package-url/purl-spec): a version's characters other than these are
// percent-encoded ('+', ':' and '~' of Debian versions among them, '~' excepted).
std::string purl_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

class Builder {
public:
  Builder(const json& manifest, const plan::Plan& plan) : m_(manifest), p_(plan) {
    const auto created = m_.value("created_at", std::int64_t{0});
    date_ = util::iso8601_utc(created);
    tool_ = "Tool: hpcbake-" + str(m_, "hpcbake_version");
    const auto dash = p_.distro_id.find('-');
    os_ = dash == std::string::npos ? p_.distro_id : p_.distro_id.substr(0, dash);
  }

  json build();

private:
  // A package element with the fields every one has (SPDX 2.3 requires SPDXID, name and
  // downloadLocation; filesAnalyzed false: no file list).
  json& add(const std::string& kind, const std::string& name, const std::string& version) {
    std::string id = "SPDXRef-" + kind + "-" + id_part(name);
    for (int n = 2; ids_.count(id); ++n)
      id = fmt::format("SPDXRef-{}-{}-{}", kind, id_part(name), n);
    ids_.insert(id);
    json pkg = {{"SPDXID", id},
                {"name", name},
                {"downloadLocation", "NOASSERTION"},
                {"filesAnalyzed", false},
                {"licenseConcluded", "NOASSERTION"},
                {"licenseDeclared", "NOASSERTION"},
                {"copyrightText", "NOASSERTION"}};
    if (!version.empty()) pkg["versionInfo"] = version;
    packages_.push_back(std::move(pkg));
    return packages_.back();
  }
  void annotate(json& pkg, const std::string& comment) {
    pkg["annotations"].push_back(
        {{"annotationDate", date_}, {"annotationType", "OTHER"}, {"annotator", tool_}, {"comment", comment}});
  }
  void relate(const std::string& from, const char* type, const std::string& to, const std::string& comment = {}) {
    json r = {{"spdxElementId", from}, {"relationshipType", type}, {"relatedSpdxElement", to}};
    if (!comment.empty()) r["comment"] = comment;
    relationships_.push_back(std::move(r));
  }
  std::string purl(const std::string& name, const std::string& version) const {
    const bool deb = p_.package_manager == manifest::PackageManager::apt;
    return fmt::format("pkg:{}/{}/{}@{}?distro={}", deb ? "deb" : "rpm", os_, name, purl_escape(version), p_.distro_id);
  }

  std::string component(const json& c, const std::string& image);
  void modules(const std::string& image);
  void repositories(const std::string& image);

  const json& m_;
  const plan::Plan& p_;
  std::string date_, tool_, os_;
  std::set<std::string> ids_;
  json packages_ = json::array();
  json relationships_ = json::array();
};

// One component: its packages (CONTAINS) and the artifacts it was installed from (GENERATED_FROM).
std::string Builder::component(const json& c, const std::string& image) {
  const std::string name = str(c, "component");
  auto& comp = add("Component", name, str(c, "version"));
  const std::string id = comp["SPDXID"].get<std::string>();
  comp["primaryPackagePurpose"] = "APPLICATION";
  comp["supplier"] = "NOASSERTION";
  comp["comment"] = "installed by hpcbake (component " + name + " of the plan)";
  relate(image, "CONTAINS", id);
  for (const auto& pk : c.value("packages", json::array())) {
    auto& pkg = add("Package", str(pk, "name"), str(pk, "version"));
    pkg["primaryPackagePurpose"] = "INSTALL";
    pkg["supplier"] = "NOASSERTION";
    if (!str(pk, "version").empty())
      pkg["externalRefs"] = json::array({{{"referenceCategory", "PACKAGE-MANAGER"},
                                          {"referenceType", "purl"},
                                          {"referenceLocator", purl(str(pk, "name"), str(pk, "version"))}}});
    annotate(pkg, fmt::format("package manager {}; {}", manifest::to_string(p_.package_manager),
                              pk.value("held", false) ? "held at this version" : "not held"));
    relate(id, "CONTAINS", pkg["SPDXID"].get<std::string>());
  }
  for (const auto& a : c.value("artifacts", json::array())) {
    auto& art = add("Artifact", str(a, "name"), str(c, "version"));
    art["primaryPackagePurpose"] = "ARCHIVE";
    if (!str(a, "url").empty()) art["downloadLocation"] = str(a, "url");
    if (!str(a, "sha256").empty())
      art["checksums"] = json::array({{{"algorithm", "SHA256"}, {"checksumValue", str(a, "sha256")}}});
    relate(id, "GENERATED_FROM", art["SPDXID"].get<std::string>(), "the component was installed from this artifact");
  }
  return id;
}

// The kernel modules hpcbake built or installed for the next-boot kernel (the manifest's modules).
void Builder::modules(const std::string& image) {
  for (const auto& mod : m_.value("modules", json::array())) {
    auto& pkg = add("Module", str(mod, "name") + "-" + str(mod, "kernel"), str(mod, "kernel"));
    pkg["name"] = str(mod, "name");
    pkg["primaryPackagePurpose"] = "FILE";
    pkg["packageFileName"] = str(mod, "path");
    if (!str(mod, "sha256").empty())
      pkg["checksums"] = json::array({{{"algorithm", "SHA256"}, {"checksumValue", str(mod, "sha256")}}});
    const std::string signer = str(mod, "signer");
    annotate(pkg, fmt::format(
                      "kernel module for {} (vermagic {}); signer: {}{}", str(mod, "kernel"), str(mod, "vermagic"),
                      signer.empty() ? "unsigned" : signer,
                      str(mod, "secure_boot_trust").empty() ? "" : "; Secure Boot: " + str(mod, "secure_boot_trust")));
    relate(image, "CONTAINS", pkg["SPDXID"].get<std::string>());
  }
}

// The package sources hpcbake configured in the image, with the signing keys they are trusted by.
void Builder::repositories(const std::string& image) {
  for (const auto& s : p_.steps) {
    if (const auto* r = s.as<plan::RepositoryStep>()) {
      auto& pkg = add("Repository", r->repository, "");
      pkg["primaryPackagePurpose"] = "OTHER";
      if (r->uri.starts_with("https://") || r->uri.starts_with("http://")) pkg["downloadLocation"] = r->uri;
      pkg["comment"] =
          fmt::format("{} repository {} (source file {})", manifest::to_string(r->manager), r->uri, r->source_path);
      annotate(pkg, fmt::format("signing key fingerprint {} (pinned; key accepted only with it), key file {}",
                                r->fingerprint, r->key_path));
      relate(image, "OTHER", pkg["SPDXID"].get<std::string>(), "a package source configured in the image");
    } else if (const auto* c = s.as<plan::CanonicalDriverStep>()) {
      auto& pkg = add("Repository", "ubuntu-archive-" + c->component, "");
      pkg["primaryPackagePurpose"] = "OTHER";
      pkg["comment"] = fmt::format("the distro's archive (keyring {}): {}", c->keyring, c->source);
      for (const auto& f : c->fingerprints)
        annotate(pkg, fmt::format("archive signing key fingerprint {} (pinned)", f));
      relate(image, "OTHER", pkg["SPDXID"].get<std::string>(), "a package source configured in the image");
    }
  }
}

json Builder::build() {
  const auto& kernel = m_.value("kernel", json::object());
  auto& img = add("Image", "hpcbake-image-" + p_.distro_id + "-" + p_.size, str(m_, "hpcbake_version"));
  const std::string image = img["SPDXID"].get<std::string>();
  img["primaryPackagePurpose"] = "OPERATING_SYSTEM";
  img["comment"] = fmt::format("an image sealed by hpcbake {} for {} ({}), next-boot kernel {}",
                               str(m_, "hpcbake_version"), p_.size, p_.distro_id, str(kernel, "next_boot"));
  annotate(img, fmt::format("image manifest /var/lib/hpcbake/image-manifest.json; plan sha256 {}",
                            str(m_.value("plan", json::object()), "sha256")));
  for (const auto& c : m_.value("components", json::array()))
    component(c, image);
  modules(image);
  repositories(image);
  relate("SPDXRef-DOCUMENT", "DESCRIBES", image);
  const std::string body = json{packages_, relationships_}.dump();
  const auto digest = util::sha256_of(body);
  const std::string name = "hpcbake-image-" + p_.distro_id + "-" + p_.size;
  return json{{"spdxVersion", "SPDX-2.3"},
              {"dataLicense", "CC0-1.0"},
              {"SPDXID", "SPDXRef-DOCUMENT"},
              {"name", name},
              {"documentNamespace", fmt::format("https://spdx.org/spdxdocs/{}-{}", id_part(name),
                                                digest ? digest->substr(0, 16) : std::string("0"))},
              {"creationInfo", {{"created", date_}, {"creators", json::array({tool_})}}},
              {"documentDescribes", json::array({image})},
              {"packages", packages_},
              {"relationships", relationships_}};
}

} // namespace

json image_sbom(const json& manifest, const plan::Plan& plan) {
  return Builder(manifest, plan).build();
}

} // namespace hpcbake::seal
