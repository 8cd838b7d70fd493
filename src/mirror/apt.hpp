#pragma once
// The part of a signed apt repository that one plan installs, copied for an offline bundle, and
// put back on the node as a local repository that apt trusts with the same pinned key.
//
// Taking a snapshot (bundle create, online):
//   1. the repository's key, accepted only with the pinned fingerprint (repo::verify_pinned_key);
//   2. InRelease, whose signature gpgv checks against that key alone; only the signed text is read;
//   3. every Packages index InRelease lists for the architecture (Env::arch) and for "all", each
//      verified against the SHA256 the signed text gives (fetch engine, into the cache);
//   4. the closure of the packages the plan asks this repository for (repo::resolve), in the
//      plan's order, honoring the preferences a chosen package ships (NVIDIA's
//      nvidia-driver-pinning-<version>: read from every chosen package of at most 4 MiB);
//   5. those .debs, each verified against the index's SHA256 (fetch engine, into the cache).
// The snapshot lists every file with its digest; the bundle carries them as artifacts. On the
// node, apt itself verifies the chain again: InRelease against the pinned key, the index against
// InRelease, each .deb against the index. Packages the repository does not have (libc6, dkms, ...)
// are left to the distribution's own repositories, and listed.
#include "exec/runner.hpp"
#include "fetch/cache.hpp"
#include "fetch/downloader.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"
#include "util/http.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::mirror {

struct Env {
  util::HttpClient* http = nullptr; // the key and InRelease (small)
  exec::Runner* runner = nullptr;   // gpgv
  fetch::Options fetch;             // indexes and packages, into fetch.cache_dir
  fetch::Observer* observer = nullptr;
  std::string arch;              // the manager's name for the plan's architecture (package_arch): amd64, aarch64, ...
  std::filesystem::path scratch; // a private directory for gpgv's files
};

struct Snapshot {
  std::string repository;
  std::string uri;
  std::string fingerprint;
  std::vector<plan::MirrorFile> files; // in the cache, each verified
  std::vector<std::string> packages;   // name=version, in the order chosen
  std::vector<std::string> other;      // relations left to the distribution
  std::vector<std::string> notes;      // what the user must know (an InRelease's Valid-Until)
  std::uint64_t bytes() const;
};

// The packages `plan` installs from `repo` (its packages steps naming that repository, in plan
// order), with the repository's own files. Errors: fetch (a key not the pin, a bad signature, an
// index or package whose digest differs, a pinned version the repository no longer has).
Result<Snapshot> snapshot_apt(const plan::Plan& plan, const plan::RepositoryStep& repo, const Env& env);

// The same for an rpm-md repository (dnf): the pinned key; repodata/repomd.xml, checked by gpgv
// against repomd.xml.asc where the repository signs its metadata (repo_gpgcheck); every data file
// repomd.xml lists (dnf reads primary, filelists, modules, ...), verified against it; the closure
// of the plan's packages from primary.xml (the highest version of each, as dnf chooses); those
// rpms, verified against primary.xml. A file the metadata names by SHA-512 only (NVIDIA's
// container toolkit repository) is read whole, bounded by its size, and checked here. dnf on the node checks each rpm's
// signature with the pinned key (gpgcheck=1), or, where the vendor signs only its metadata (signatures: metadata,
// gpgcheck=0), each rpm against the signed primary.xml's checksum, as here.
Result<Snapshot> snapshot_dnf(const plan::Plan& plan, const plan::RepositoryStep& repo, const Env& env);

// The preferences a .deb ships (etc/apt/preferences.d/*, only the names apt reads), concatenated;
// empty when none.
Result<std::string> deb_preferences(const std::filesystem::path& deb);

// Copies `files` from `cache` (entries already verified) to `dir`/path, each through a temporary
// file and a rename, mode 0644 in 0755 directories. A path that would leave `dir` is refused.
Status materialize(const std::vector<plan::MirrorFile>& files, const fetch::Cache& cache,
                   const std::filesystem::path& dir);

} // namespace hpcbake::mirror
