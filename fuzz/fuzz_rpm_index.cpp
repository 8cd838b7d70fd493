// rpm-md repository metadata (repo/rpm_index.hpp), as a bundle reads a dnf repository: the
// input is read as repodata/repomd.xml (repo::parse_repomd) and as primary.xml
// (repo::PrimaryParser), fed whole and fed in small chunks (a download arrives in pieces), then
// the closure of its first packages (repo::resolve_rpm). Properties: every data file repomd
// lists is at a location inside the repository, and a SHA-256 it gives is 64 hex digits; a
// primary.xml that reads has, for each package of the architecture asked (or noarch), a location
// inside the repository and a 64-hex SHA-256 in lower case; the chunks do not change what is
// read; rpm's order is reflexive and antisymmetric on the versions read; a resolution selects
// only packages of the index.
#include "fuzz_util.hpp"
#include "repo/rpm_index.hpp"
#include "util/strings.hpp"

#include <algorithm>

using namespace hpcbake_fuzz;
namespace repo = hpcbake::repo;

namespace {

bool hex64(const std::string& s, bool lower_only) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [&](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (!lower_only && c >= 'A' && c <= 'F');
         });
}

bool inside_repository(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find("://") != std::string::npos) return false;
  for (const auto part : hpcbake::util::split(p, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return true;
}

struct Read {
  bool ok = false;
  std::string error;
  std::vector<repo::RpmPackage> packages;
};

Read primary(std::string_view text, std::size_t chunk) {
  repo::PrimaryParser parser("x86_64", "primary.xml");
  Read r;
  std::size_t at = 0;
  do {
    const std::size_t n = std::min(chunk, text.size() - at);
    auto st = parser.feed(text.substr(at, n), at + n == text.size());
    at += n;
    if (!st) {
      r.error = st.error().message;
      return r;
    }
  } while (at < text.size());
  r.ok = true;
  r.packages = parser.take();
  return r;
}

bool same(const repo::RpmPackage& a, const repo::RpmPackage& b) {
  return a.name == b.name && a.arch == b.arch && a.evr() == b.evr() && a.sha256 == b.sha256 &&
         a.location == b.location && a.size == b.size && a.files == b.files && a.provides.size() == b.provides.size() &&
         a.requirements.size() == b.requirements.size() && a.conflicts.size() == b.conflicts.size();
}

void versions(const std::vector<repo::RpmPackage>& pkgs) {
  const std::size_t n = std::min<std::size_t>(pkgs.size(), 8);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& a = pkgs[i];
    check(repo::compare_rpm_evr(a.epoch, a.ver, a.rel, a.epoch, a.ver, a.rel) == 0,
          "a version that is not equal to itself: " + a.evr());
    for (std::size_t j = i + 1; j < n; ++j) {
      const auto& b = pkgs[j];
      const int ab = repo::compare_rpm_evr(a.epoch, a.ver, a.rel, b.epoch, b.ver, b.rel);
      const int ba = repo::compare_rpm_evr(b.epoch, b.ver, b.rel, a.epoch, a.ver, a.rel);
      check((ab > 0) == (ba < 0) && (ab == 0) == (ba == 0),
            "rpm's order is not antisymmetric: " + a.evr() + " / " + b.evr());
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = as_text(data, size);
  if (auto md = repo::parse_repomd(text, "repomd.xml")) {
    for (const auto& d : *md) {
      check(inside_repository(d.location), "a repomd data file outside the repository: " + d.location);
      check(d.sha256.empty() || hex64(d.sha256, true), "a repomd SHA-256 that is not 64 hex digits: " + d.sha256);
    }
  } else {
    check(!md.error().message.empty(), "a repomd refused without a message");
  }
  const Read whole = primary(text, text.size() + 1);
  const Read chunked = primary(text, 1 + (size ? data[0] % 61 : 0));
  check(whole.ok == chunked.ok, "primary.xml read whole and in chunks: one read, one refused");
  if (!whole.ok) {
    check(!whole.error.empty(), "a primary.xml refused without a message");
    return 0;
  }
  check(whole.packages.size() == chunked.packages.size(), "chunks changed the number of packages read");
  for (std::size_t i = 0; i < whole.packages.size(); ++i) {
    const auto& p = whole.packages[i];
    check(same(p, chunked.packages[i]), "chunks changed what was read of " + p.name.substr(0, 80));
    check(p.arch == "x86_64" || p.arch == "noarch", "a package for another architecture: " + p.arch);
    check(inside_repository(p.location), "a package outside the repository: " + p.location);
    check(hex64(p.sha256, true), "a package without a SHA-256: " + p.name.substr(0, 80));
  }
  versions(whole.packages);
  const auto& pkgs = whole.packages;
  if (pkgs.empty() || pkgs.size() > 64) return 0;
  std::vector<std::string> requests = {pkgs.front().name};
  if (pkgs.size() > 1) requests.push_back(pkgs[1].name + "-" + pkgs[1].ver);
  for (const bool soft : {false, true}) {
    auto r = repo::resolve_rpm(pkgs, requests, soft);
    if (!r) continue;
    for (const auto& s : r->selected)
      check(std::any_of(pkgs.begin(), pkgs.end(), [&](const repo::RpmPackage& p) { return same(p, s); }),
            "a resolution selected a package the index does not hold: " + s.name);
  }
  return 0;
}
