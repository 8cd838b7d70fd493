#pragma once
// rpm-md repository metadata (what dnf reads), parsed natively so an offline bundle can carry the
// part of a repository an install needs: repodata/repomd.xml (the data files with their SHA-256)
// and primary.xml (each package's location, SHA-256, provides and requires), and the closure of
// requested packages inside the repository, choosing the highest version as dnf would. XML is
// read with expat, streaming: EPEL's primary.xml is tens of megabytes.
#include "util/error.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::repo {

struct RepomdData {
  std::string type; // primary, filelists, other, updateinfo, modules, group, ...
  std::string location;
  std::string sha256; // empty when the repository gives another digest type
  std::string sha512; // the same for SHA-512 (NVIDIA's container toolkit repository lists only these)
  std::string checksum_type;
  std::uint64_t size = 0;
};
Result<std::vector<RepomdData>> parse_repomd(std::string_view xml, const std::string& label);

struct RpmEntry {
  std::string name;
  std::string flags; // "", EQ, LT, LE, GT, GE
  std::string epoch, ver, rel;
  std::string text() const;
};

struct RpmPackage {
  std::string name, arch, epoch, ver, rel;
  std::string sha256, location;
  std::string sha512; // where primary.xml gives SHA-512 instead of SHA-256 (then sha256 is empty)
  std::uint64_t size = 0;
  std::vector<RpmEntry> provides, requirements, conflicts;
  std::vector<std::string> files;
  std::string evr() const; // "[epoch:]ver-rel"
};

// rpm's order of epoch, version, release (rpmvercmp: '~' before everything, '^' after the end).
int compare_rpm_evr(const std::string& e1, const std::string& v1, const std::string& r1, const std::string& e2,
                    const std::string& v2, const std::string& r2);

// Feeds primary.xml in chunks; packages for `arch` and noarch. Errors name the package: a
// location that leaves the repository, a digest other than SHA-256 or SHA-512.
class PrimaryParser {
public:
  PrimaryParser(std::string arch, std::string label);
  ~PrimaryParser();
  PrimaryParser(const PrimaryParser&) = delete;
  PrimaryParser& operator=(const PrimaryParser&) = delete;
  Status feed(std::string_view chunk, bool last);
  std::vector<RpmPackage> take();

private:
  struct State;
  std::unique_ptr<State> s_;
};

struct RpmResolution {
  std::vector<RpmPackage> selected;
  std::vector<std::string> other; // requirements nothing here provides: the distribution's
};
// The closure of `requests` ("name", or "name-version[-release]") inside `index`. With `soft`, a
// request nothing here provides is left to the distribution instead of an error (the build tools,
// of which only dkms comes from EPEL).
Result<RpmResolution> resolve_rpm(const std::vector<RpmPackage>& index, const std::vector<std::string>& requests,
                                  bool soft);

} // namespace hpcbake::repo
