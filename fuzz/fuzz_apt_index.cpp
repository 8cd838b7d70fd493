// apt repository metadata (repo/apt_index.hpp), as a bundle reads a vendor repository: the
// Release's SHA256 list (repo::release_files; InRelease after gpgv, whose output is the same
// text), the Packages index (repo::parse_packages), apt preferences (repo::parse_preferences),
// dpkg's version order, and the closure of the first packages inside the index (repo::resolve).
// The input is read as each of them. Properties: what is listed is what can be fetched safely:
// every index file and package has a 64-hex SHA-256 (lower case) and a path relative to the
// repository with no "." or ".." component; every package is for the architecture asked or
// "all"; dpkg's order is a total order on the versions read (reflexive, antisymmetric); a
// resolution selects only packages of the index, one version of each, the one asked for.
#include "fuzz_util.hpp"
#include "repo/apt_index.hpp"
#include "util/strings.hpp"

#include <algorithm>
#include <set>

using namespace hpcbake_fuzz;
namespace repo = hpcbake::repo;

namespace {

bool lower_hex64(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool inside_repository(const std::string& p) {
  if (p.empty() || p.front() == '/') return false;
  for (const auto part : hpcbake::util::split(p, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

void versions(const std::vector<repo::Package>& pkgs) {
  const std::size_t n = std::min<std::size_t>(pkgs.size(), 8);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& a = pkgs[i].version;
    check(repo::compare_debian_versions(a, a) == 0, "a version that is not equal to itself: " + a);
    for (std::size_t j = i + 1; j < n; ++j) {
      const auto& b = pkgs[j].version;
      check(repo::compare_debian_versions(a, b) == -repo::compare_debian_versions(b, a),
            "dpkg's order is not antisymmetric: " + a + " / " + b);
    }
  }
}

void resolution(const std::vector<repo::Package>& pkgs, const std::vector<repo::Pin>& pins) {
  if (pkgs.empty() || pkgs.size() > 64) return; // the closure is quadratic-ish: small indexes only
  std::vector<std::string> requests = {pkgs.front().name};
  if (pkgs.size() > 1) requests.push_back(pkgs[1].name + "=" + pkgs[1].version);
  const auto none = [](const repo::Package&) -> hpcbake::Result<std::vector<repo::Pin>> {
    return std::vector<repo::Pin>{};
  };
  auto r = repo::resolve(pkgs, requests, pins, none);
  if (!r) {
    check(!r.error().message.empty(), "a resolution refused without a message");
    return;
  }
  std::set<std::string> names;
  for (const auto& s : r->selected) {
    check(names.insert(s.name).second, "a resolution selected two versions of " + s.name.substr(0, 80));
    const bool listed = std::any_of(pkgs.begin(), pkgs.end(), [&](const repo::Package& p) {
      return p.name == s.name && p.version == s.version && p.sha256 == s.sha256 && p.filename == s.filename;
    });
    check(listed, "a resolution selected a package the index does not hold: " + s.name);
  }
  if (requests.size() > 1)
    for (const auto& s : r->selected)
      check(s.name != pkgs[1].name || repo::compare_debian_versions(s.version, pkgs[1].version) == 0, // "015" is "15"
            "a resolution selected another version than the one asked: " + s.name + "=" + s.version);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  if (auto files = repo::release_files(text, "Release")) {
    for (const auto& f : *files)
      check(lower_hex64(f.sha256) && !f.path.empty(), "a Release entry without a SHA-256 or a path: " + f.path);
  } else {
    check(!files.error().message.empty(), "a Release refused without a message");
  }
  auto pkgs = repo::parse_packages(text, "amd64", "Packages");
  if (!pkgs) {
    check(!pkgs.error().message.empty(), "a Packages index refused without a message");
    return 0;
  }
  for (const auto& p : *pkgs) {
    check(p.arch == "amd64" || p.arch == "all", "a package for another architecture: " + p.arch);
    check(lower_hex64(p.sha256), "a package without a SHA-256: " + p.name);
    check(inside_repository(p.filename), "a package file outside the repository: " + p.filename);
  }
  versions(*pkgs);
  resolution(*pkgs, repo::parse_preferences(text));
  return 0;
}
