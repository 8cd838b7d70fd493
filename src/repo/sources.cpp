#include "repo/sources.hpp"

#include "repo/apt_index.hpp"

#include "util/paths.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::repo {

namespace {

Status check(const manifest::RepositoryManifest& r, const manifest::RepositoryVariant& v) {
  auto bad = [&](const std::string& what) {
    return fail(ErrorKind::manifest, fmt::format("{}: {} cannot go into a repository file", r.file, what),
                "fix the repository manifest (hpcbake manifest lint)");
  };
  if (!util::is_config_word(r.id)) return bad(fmt::format("the id '{}'", r.id));
  if (!manifest::is_repository_uri(v.uri)) return bad(fmt::format("the URI '{}'", util::redact_url(v.uri)));
  if (!v.suite.empty() && !util::is_config_word(v.suite)) return bad(fmt::format("the suite '{}'", v.suite));
  for (const auto& c : v.components)
    if (!util::is_config_word(c)) return bad(fmt::format("the component '{}'", c));
  if (v.key.fingerprint.empty()) return bad("a repository without a pinned key");
  if (v.metadata_only && v.metadata_only_source.empty())
    return bad("signatures: metadata without signatures_source (who publishes the repository that way)");
  return {};
}

// One line of free text for a comment or a name=: control bytes dropped.
std::string text_line(const std::string& s) {
  std::string out;
  for (char c : s)
    out.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
  return std::string(util::trim(out));
}

} // namespace

Result<SourceFiles> source_files(const manifest::RepositoryManifest& r, const manifest::RepositoryVariant& v,
                                 manifest::PackageManager pm) {
  HPCBAKE_TRY(check(r, v));
  SourceFiles f;
  const std::string header =
      fmt::format("# Written by hpcbake from {}: {}\n# The signing key is pinned by fingerprint {}.\n",
                  text_line(fmt::format("repositories/{}.yaml", r.id)), text_line(r.description), v.key.fingerprint);
  if (pm == manifest::PackageManager::apt) {
    if (v.metadata_only)
      return fail(ErrorKind::manifest,
                  fmt::format("{}: signatures: metadata is a dnf setting (apt's InRelease is signed anyway)", r.file),
                  "drop it from the variant for apt distros (hpcbake manifest lint)");
    f.key_path = fmt::format("{}/hpcbake-{}.gpg", paths::kAptKeyringDir, r.id);
    f.source_path = fmt::format("{}/hpcbake-{}.sources", paths::kAptSourcesDir, r.id);
    const std::string suite = v.suite.empty() ? "/" : v.suite;
    f.source = header + "Types: deb\n" + fmt::format("URIs: {}\n", v.uri) + fmt::format("Suites: {}\n", suite);
    if (suite != "/") f.source += fmt::format("Components: {}\n", util::join(v.components, " "));
    f.source += fmt::format("Signed-By: {}\n", f.key_path);
  } else {
    f.key_path = fmt::format("{}/RPM-GPG-KEY-hpcbake-{}", paths::kRpmKeyDir, r.id);
    f.source_path = fmt::format("{}/hpcbake-{}.repo", paths::kDnfReposDir, r.id);
    if (v.metadata_only) // why gpgcheck=0 is not a weakening, where the reader of the file sees it
      f.source = header + "# The vendor signs repomd.xml, not its packages: dnf checks repomd.xml.asc with this key\n"
                          "# (repo_gpgcheck=1) and each package against the checksum the signed metadata lists.\n";
    else
      f.source = header;
    f.source += fmt::format("[hpcbake-{}]\n", r.id) + fmt::format("name={}\n", text_line(r.description)) +
                fmt::format("baseurl={}\n", v.uri) + "enabled=1\n" +
                fmt::format("gpgcheck={}\n", v.metadata_only ? 0 : 1) +
                fmt::format("repo_gpgcheck={}\n", v.repo_gpgcheck || v.metadata_only ? 1 : 0) +
                fmt::format("gpgkey=file://{}\n", f.key_path);
  }
  return f;
}

std::optional<Preferences> apt_preferences(const std::string& component, const std::string& repository,
                                           const std::vector<std::string>& packages) {
  std::string stanzas;
  for (const auto& p : packages) {
    const auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == p.size()) continue;
    const std::string name = p.substr(0, eq), version = p.substr(eq + 1);
    if (!util::is_config_word(name) || !util::is_config_word(version)) continue; // lint refuses these
    stanzas += fmt::format("\nPackage: {}\nPin: version {}\nPin-Priority: 1001\n", name, version);
  }
  const std::string name = fmt::format("hpcbake-{}.pref", component);
  if (stanzas.empty() || !apt_reads_preferences_file(name)) return std::nullopt; // apt would skip the file
  return Preferences{fmt::format("{}/{}", paths::kAptPreferencesDir, name),
                     fmt::format("# Written by hpcbake: {} from the {} repository, each package at exactly its "
                                 "pinned\n# version.\n",
                                 component, text_line(repository)) +
                         stanzas};
}

} // namespace hpcbake::repo
