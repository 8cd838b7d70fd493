#pragma once
// What apt and dnf read to trust a vendor repository, as text the planner puts in the plan:
// apt a deb822 .sources file whose Signed-By names the pinned key alone (never the global
// trusted.gpg.d), dnf a .repo with gpgcheck=1 (and repo_gpgcheck=1 where the vendor signs
// repomd.xml) and gpgkey= the pinned key file; where the manifest says the vendor signs only
// repomd.xml (`signatures: metadata`), repo_gpgcheck=1 and gpgcheck=0, with a comment saying so.
// Every value is one line: a manifest cannot add a field.
#include "manifest/manifests.hpp"
#include "util/error.hpp"

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::repo {

struct SourceFiles {
  std::string key_path;    // host path of the verified key (binary keyring for apt, armored for rpm)
  std::string source_path; // host path of the .sources / .repo file
  std::string source;      // its content
};

// The files for repository `r` on a distro using `pm`. Errors (manifest) when a value would
// break the file format.
Result<SourceFiles> source_files(const manifest::RepositoryManifest& r, const manifest::RepositoryVariant& v,
                                 manifest::PackageManager pm);

// apt preferences that hold each `name=version` package of a component at exactly that version
// (Pin-Priority 1001: apt installs it, even as a downgrade, and never upgrades it), as the file
// /etc/apt/preferences.d/hpcbake-<component>.pref. Packages named without a version are left to
// the repository (such as NVIDIA's nvidia-driver-pinning-<version>, which ships its own
// preferences). nullopt when no package has a version.
struct Preferences {
  std::string path;
  std::string content;
};
std::optional<Preferences> apt_preferences(const std::string& component, const std::string& repository,
                                           const std::vector<std::string>& packages);

} // namespace hpcbake::repo
