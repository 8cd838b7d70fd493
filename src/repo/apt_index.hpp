#pragma once
// apt repository metadata, read natively so an offline bundle can carry exactly the part of a
// vendor repository an install needs: the signed Release (its SHA256 list of index files), the
// Packages index, Debian version order (dpkg's), dependency fields, apt preferences, and the
// closure of a set of requested packages inside one repository, choosing versions the way apt
// would (explicit `name=version`, then preferences, then the highest version; Conflicts and
// Breaks of what is chosen respected). Everything here is parsing and choosing; the downloads and
// the signature check are the caller's (mirror/).
#include "util/error.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hpcbake::repo {

// One deb822 paragraph: fields in order, continuation lines joined with '\n'.
struct Stanza {
  std::vector<std::pair<std::string, std::string>> fields;
  const std::string* get(std::string_view name) const; // case-insensitive, as apt reads them
};
std::vector<Stanza> parse_deb822(std::string_view text);

// dpkg's order: epoch, then upstream and revision with '~' before everything.
int compare_debian_versions(std::string_view a, std::string_view b);

// The files a Release lists under SHA256: (path relative to the Release's directory, digest, size).
struct IndexFile {
  std::string path;
  std::string sha256;
  std::uint64_t size = 0;
};
Result<std::vector<IndexFile>> release_files(std::string_view release, const std::string& label);

// One relation: name (":any" and the like removed), an optional operator and version.
struct Relation {
  std::string name;
  std::string op; // "", "<<", "<=", "=", ">=", ">>"
  std::string version;
  std::string text() const;
};
// "a (>= 1) | b, c" -> {{a>=1, b}, {c}}. Errors name the field.
Result<std::vector<std::vector<Relation>>> parse_relations(std::string_view field, const std::string& label);
bool satisfies(const std::string& version, const Relation& r);

struct Package {
  std::string name, version, arch;
  std::string filename; // relative to the repository root, "./" removed
  std::string sha256;
  std::uint64_t size = 0;
  std::vector<std::vector<Relation>> depends; // Pre-Depends, then Depends
  std::vector<Relation> conflicts;            // Conflicts and Breaks
  std::vector<Relation> provides;
};
// Every stanza of a Packages index for `arch` (and "all"). A stanza without a safe Filename
// (relative, no "..") or a SHA256 is an error naming it: the bundle could not carry it verified.
Result<std::vector<Package>> parse_packages(std::string_view text, const std::string& arch, const std::string& label);

// apt_preferences(5) entries that pin by version ("Pin: version 580.126.16-1", globs allowed);
// entries pinning by release or origin are left out (they rank every version of one repository
// alike, so they do not change a choice inside it). "src:" package patterns are not understood.
struct Pin {
  std::vector<std::string> packages; // names or globs
  std::string version;               // glob, or "/regex/"; empty: not a version pin
  int priority = 500;
};
std::vector<Pin> parse_preferences(std::string_view text);
// Whether apt reads a file of this name in preferences.d: only letters, digits, '-', '_' and '.',
// and either the extension ".pref" or no '.' at all (apt_preferences(5)); apt silently skips the
// rest, so "nvidia-driver-pinning-580.126.16" pins nothing.
bool apt_reads_preferences_file(std::string_view name);

struct Resolution {
  std::vector<Package> selected;  // in the order chosen
  std::vector<std::string> other; // relations no package of this repository satisfies: left to the
                                  // distribution's own repositories
};
// The closure of `requests` ("name" or "name=version") inside `index`. `inspect` is called for
// each package as it is chosen and returns the preferences it ships (apt reads them before it
// chooses the next package: NVIDIA's nvidia-driver-pinning-<version>). A request nothing in the
// repository satisfies, or a dependency on a package the repository has but cannot give in a
// version that fits what is already chosen (its pins, Conflicts and Breaks), is an error naming
// it; a dependency on packages the repository does not have is the distribution's (`other`).
Result<Resolution> resolve(const std::vector<Package>& index, const std::vector<std::string>& requests,
                           std::vector<Pin> pins,
                           const std::function<Result<std::vector<Pin>>(const Package&)>& inspect);

} // namespace hpcbake::repo
