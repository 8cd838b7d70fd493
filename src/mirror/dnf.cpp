#include "mirror/apt.hpp"
#include "mirror/common.hpp"

#include "repo/rpm_index.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

namespace hpcbake::mirror {

namespace {

Result<std::string> sha512_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha512(), nullptr) != 1)
    return fail(ErrorKind::internal, "OpenSSL could not compute a SHA-512 digest");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

// A file the signed metadata names by SHA-512 only (NVIDIA's container toolkit repository): the
// fetch engine verifies SHA-256, so it is read whole (bounded by the size the metadata gives, or
// kMaxMetadataBytes), checked against the SHA-512, and then kept in the cache by its SHA-256.
Result<plan::MirrorFile> get_by_sha512(const Env& env, const fetch::Cache& cache, const std::string& uri,
                                       const std::string& path, const std::string& sha512, std::uint64_t size,
                                       const std::string& label) {
  using namespace detail;
  HPCBAKE_TRY_ASSIGN(auto bytes, http_get(env, fetch::join_url(uri, path), size ? size : kMaxMetadataBytes));
  if (size && bytes.size() != size)
    return fail(ErrorKind::fetch,
                fmt::format("{}: {}: size mismatch: expected {} bytes, got {}", label, path, size, bytes.size()),
                "the repository changed under its signed metadata: do not use it");
  HPCBAKE_TRY_ASSIGN(auto got, sha512_hex(bytes));
  if (got != sha512)
    return fail(ErrorKind::fetch,
                fmt::format("{}: {}: SHA-512 mismatch: expected {}, got {}", label, path, sha512, got),
                "the repository changed under its signed metadata: do not use it");
  return put_bytes(cache, path, bytes);
}

} // namespace

Result<Snapshot> snapshot_dnf(const plan::Plan& plan, const plan::RepositoryStep& r, const Env& env) {
  using namespace detail;
  Snapshot snap{r.repository, r.uri, r.fingerprint, {}, {}, {}, {}};
  const fetch::Cache cache(env.fetch.cache_dir);
  const std::string label = fmt::format("repository {} ({})", r.repository, util::redact_url(r.uri));
  HPCBAKE_TRY_ASSIGN(auto key, pinned_key(r, env, label));
  snap.files.push_back(key.file);
  // repomd.xml, and its signature where the vendor signs it
  const std::string repomd_path = "repodata/repomd.xml";
  HPCBAKE_TRY_ASSIGN(auto repomd, http_get(env, fetch::join_url(r.uri, repomd_path), kMaxMetadataBytes));
  // Packages the vendor does not sign are trusted through repomd.xml's signature alone: never
  // read such a repository without checking it (the plan reader refuses neither-signed too).
  if (!r.signed_metadata && !r.signed_packages)
    return fail(ErrorKind::fetch, fmt::format("{}: neither its metadata nor its packages are signed", label),
                "fix the repository manifest: signatures: metadata needs repomd.xml.asc");
  if (r.signed_metadata) {
    HPCBAKE_TRY_ASSIGN(auto asc, http_get(env, fetch::join_url(r.uri, repomd_path + ".asc"), kMaxKeyBytes));
    HPCBAKE_TRY(gpgv(env, key.key, repomd, &asc, label + " " + repomd_path));
    HPCBAKE_TRY_ASSIGN(auto asc_file, put_bytes(cache, repomd_path + ".asc", asc));
    snap.files.push_back(asc_file);
  }
  HPCBAKE_TRY_ASSIGN(auto repomd_file, put_bytes(cache, repomd_path, repomd));
  snap.files.push_back(repomd_file);
  // every data file it lists, verified against it
  HPCBAKE_TRY_ASSIGN(auto data, repo::parse_repomd(repomd, label + " " + repomd_path));
  std::vector<fetch::Job> jobs;
  std::string primary_sha;
  for (const auto& d : data) {
    if (d.sha256.empty() && !d.sha512.empty()) { // verified here, then kept by its SHA-256
      HPCBAKE_TRY_ASSIGN(auto f, get_by_sha512(env, cache, r.uri, d.location, d.sha512, d.size, label));
      snap.files.push_back(f);
      if (d.type == "primary") primary_sha = f.sha256;
      continue;
    }
    if (d.sha256.empty())
      return fail(ErrorKind::fetch,
                  fmt::format("{}: {} lists {} with a {} digest, not SHA-256 or SHA-512: it cannot be verified", label,
                              repomd_path, d.location, d.checksum_type.empty() ? "missing" : d.checksum_type));
    jobs.push_back({r.repository + "/" + d.location, {fetch::join_url(r.uri, d.location)}, d.sha256, d.size});
    snap.files.push_back({d.location, d.sha256, d.size});
    if (d.type == "primary") primary_sha = d.sha256;
  }
  if (primary_sha.empty()) return fail(ErrorKind::fetch, fmt::format("{}: {} lists no primary", label, repomd_path));
  HPCBAKE_TRY(download(env, jobs));
  repo::PrimaryParser parser(env.arch, label + " primary.xml");
  HPCBAKE_TRY(read_index(cache.entry(primary_sha), label + " primary.xml",
                         [&](std::string_view chunk, bool last) { return parser.feed(chunk, last); }));
  const auto index = parser.take();
  // the plan's packages and what they need from here
  HPCBAKE_TRY_ASSIGN(auto hard, repo::resolve_rpm(index, requests_of(plan, r.repository, false), false));
  HPCBAKE_TRY_ASSIGN(auto soft, repo::resolve_rpm(index, requests_of(plan, r.repository, true), true));
  std::vector<fetch::Job> rpms;
  std::set<std::string> seen;
  for (const auto* res : {&hard, &soft}) {
    for (const auto& p : res->selected) {
      if (!seen.insert(p.location).second) continue;
      if (p.sha256.empty()) { // SHA-512 only: read whole, bounded by its size in primary.xml
        HPCBAKE_TRY_ASSIGN(auto f, get_by_sha512(env, cache, r.uri, p.location, p.sha512, p.size, label));
        snap.files.push_back(f);
      } else {
        rpms.push_back({r.repository + "/" + p.location, {fetch::join_url(r.uri, p.location)}, p.sha256, p.size});
        snap.files.push_back({p.location, p.sha256, p.size});
      }
      snap.packages.push_back(fmt::format("{}-{}.{}", p.name, p.evr(), p.arch));
    }
    snap.other.insert(snap.other.end(), res->other.begin(), res->other.end());
  }
  HPCBAKE_TRY(download(env, rpms));
  std::sort(snap.other.begin(), snap.other.end());
  snap.other.erase(std::unique(snap.other.begin(), snap.other.end()), snap.other.end());
  return snap;
}

} // namespace hpcbake::mirror
