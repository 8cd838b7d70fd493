#pragma once
// What the apt and dnf snapshots share: small fetches, the pinned key, gpgv with that key alone,
// bytes into the cache, verified downloads, decompressing an index, what the plan asks of a
// repository.
#include "mirror/apt.hpp"
#include "repo/openpgp.hpp"

#include <functional>
#include <string_view>

namespace hpcbake::mirror::detail {

inline constexpr std::size_t kMaxKeyBytes = 256 * 1024;
inline constexpr std::size_t kMaxMetadataBytes = 16u << 20; // InRelease, repomd.xml and its signature

Result<std::string> http_get(const Env& env, const std::string& url, std::size_t max);

// The repository's key from its URLs, accepted only with the pinned fingerprint; kept in the
// cache as the snapshot's kRepoMirrorKey file.
struct PinnedKey {
  repo::KeyFile key;
  plan::MirrorFile file;
};
Result<PinnedKey> pinned_key(const plan::RepositoryStep& r, const Env& env, const std::string& label);

// Bytes already verified another way (the pinned key, a signed file) into the cache.
Result<plan::MirrorFile> put_bytes(const fetch::Cache& cache, const std::string& path, const std::string& bytes);

// gpgv with the pinned key alone. `signed_file` clear-signed (detached empty): returns the signed
// text gpgv extracted; with `detached`, checks it against `signed_file` and returns that file.
Result<std::string> gpgv(const Env& env, const repo::KeyFile& key, const std::string& signed_file,
                         const std::string* detached, const std::string& label);

// Feeds an index file (as is, or decompressed: gz, xz, bz2, zstd) to `sink` in chunks.
Status read_index(const std::filesystem::path& file, const std::string& label,
                  const std::function<Status(std::string_view, bool last)>& sink);

// Downloads into the cache, each verified by its SHA-256; any failure is an error.
Status download(const Env& env, const std::vector<fetch::Job>& jobs);

// The packages the plan asks of repository `id`, in plan order: from a component's steps (it must
// be there), and from the distribution's own steps that list it (`soft`: the rest is the
// distribution's, as EPEL gives dkms and nothing else of the build tools).
std::vector<std::string> requests_of(const plan::Plan& plan, const std::string& id, bool soft);

} // namespace hpcbake::mirror::detail
