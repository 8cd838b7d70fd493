#include "mirror/apt.hpp"
#include "mirror/common.hpp"

#include "repo/apt_index.hpp"
#include "repo/openpgp.hpp"
#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"
#include "util/paths.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>

namespace hpcbake::mirror {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxIndexBytes = 512u << 20; // an uncompressed Packages index
constexpr std::uint64_t kInspectBytes = 4u << 20;  // packages read for the preferences they ship

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

struct Layout {
  std::string release_dir; // "" (flat) or "dists/<suite>/"
  std::vector<std::string> index_dirs;
};

Layout layout(const plan::RepositoryStep& r, const std::string& arch) {
  if (r.suite.empty() || r.suite == "/") return {"", {""}};
  Layout l{fmt::format("dists/{}/", r.suite), {}};
  for (const auto& c : r.components) {
    l.index_dirs.push_back(fmt::format("{}/binary-{}/", c, arch));
    l.index_dirs.push_back(fmt::format("{}/binary-all/", c));
  }
  return l;
}

bool is_packages_index(const std::string& path, const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) {
    if (!path.starts_with(d)) continue;
    const std::string name = path.substr(d.size());
    for (const char* n : {"Packages", "Packages.gz", "Packages.xz", "Packages.bz2", "Packages.zst", "Packages.lzma"})
      if (name == n) return true;
  }
  return false;
}

} // namespace

std::uint64_t Snapshot::bytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files)
    n += f.size;
  return n;
}

Result<std::string> deb_preferences(const fs::path& deb) {
  ArchivePtr outer(archive_read_new());
  archive_read_support_format_ar(outer.get());
  if (archive_read_open_filename(outer.get(), deb.c_str(), 1 << 16) != ARCHIVE_OK)
    return fail(ErrorKind::fetch, fmt::format("{}: {}", deb.string(), archive_error_string(outer.get())));
  archive_entry* e = nullptr;
  std::string prefs;
  while (archive_read_next_header(outer.get(), &e) == ARCHIVE_OK) {
    const std::string member = archive_entry_pathname(e);
    if (!member.starts_with("data.tar")) continue;
    std::string data;
    std::vector<char> buf(1 << 16);
    la_ssize_t n;
    while ((n = archive_read_data(outer.get(), buf.data(), buf.size())) > 0 && data.size() <= (16u << 20))
      data.append(buf.data(), static_cast<std::size_t>(n));
    ArchivePtr inner(archive_read_new());
    archive_read_support_format_tar(inner.get());
    archive_read_support_filter_all(inner.get());
    if (archive_read_open_memory(inner.get(), data.data(), data.size()) != ARCHIVE_OK)
      return fail(ErrorKind::fetch, fmt::format("{}: {}: {}", deb.string(), member, archive_error_string(inner.get())));
    archive_entry* f = nullptr;
    while (archive_read_next_header(inner.get(), &f) == ARCHIVE_OK) {
      std::string path = archive_entry_pathname(f);
      while (path.starts_with("./"))
        path.erase(0, 2);
      constexpr std::string_view dir = "etc/apt/preferences.d/";
      if (!path.starts_with(dir) || archive_entry_filetype(f) != AE_IFREG ||
          !repo::apt_reads_preferences_file(std::string_view(path).substr(dir.size())))
        continue; // apt would not read it either
      std::string text;
      while ((n = archive_read_data(inner.get(), buf.data(), buf.size())) > 0 && text.size() <= 65536)
        text.append(buf.data(), static_cast<std::size_t>(n));
      prefs += text + "\n\n";
    }
    break;
  }
  return prefs;
}

Result<Snapshot> snapshot_apt(const plan::Plan& plan, const plan::RepositoryStep& r, const Env& env) {
  using namespace detail;
  Snapshot snap{r.repository, r.uri, r.fingerprint, {}, {}, {}, {}};
  const fetch::Cache cache(env.fetch.cache_dir);
  const std::string label = fmt::format("repository {} ({})", r.repository, util::redact_url(r.uri));
  // 1. the key, by its pin
  HPCBAKE_TRY_ASSIGN(auto key, pinned_key(r, env, label));
  snap.files.push_back(key.file);
  // 2. InRelease, verified
  const Layout lay = layout(r, env.arch);
  const std::string inrelease_path = lay.release_dir + "InRelease";
  HPCBAKE_TRY_ASSIGN(auto inrelease, http_get(env, fetch::join_url(r.uri, inrelease_path), kMaxMetadataBytes));
  HPCBAKE_TRY_ASSIGN(auto release, gpgv(env, key.key, inrelease, nullptr, label + " " + inrelease_path));
  HPCBAKE_TRY_ASSIGN(auto inrelease_file, put_bytes(cache, inrelease_path, inrelease));
  snap.files.push_back(inrelease_file);
  // 3. the Packages indexes it lists, verified against it
  HPCBAKE_TRY_ASSIGN(auto listed, repo::release_files(release, label + " " + inrelease_path));
  std::vector<fetch::Job> index_jobs;
  for (const auto& f : listed)
    if (is_packages_index(f.path, lay.index_dirs))
      index_jobs.push_back({r.repository + "/" + lay.release_dir + f.path,
                            {fetch::join_url(r.uri, lay.release_dir + f.path)},
                            f.sha256,
                            f.size});
  if (index_jobs.empty())
    return fail(ErrorKind::fetch,
                fmt::format("{}: {} lists no Packages index for {}", label, inrelease_path, env.arch));
  // Every compression InRelease lists, as apt on the node may ask for any; one missing on the
  // server (Debian's archives list an uncompressed Packages they do not serve) is left out, so
  // long as each directory keeps one.
  HPCBAKE_TRY_ASSIGN(auto got, fetch::download(index_jobs, env.fetch, *env.observer));
  std::map<std::string, std::string> failed; // directory -> why
  std::set<std::string> have_dirs;
  std::vector<fetch::Job> have;
  for (std::size_t i = 0; i < index_jobs.size(); ++i) {
    const std::string rel = index_jobs[i].name.substr(r.repository.size() + 1);
    const std::string dir = rel.substr(0, rel.rfind('/') + 1);
    if (got.results[i].ok) {
      have.push_back(index_jobs[i]);
      have_dirs.insert(dir);
    } else {
      failed[dir] = got.results[i].error;
    }
  }
  for (const auto& [dir, why] : failed)
    if (!have_dirs.count(dir))
      return fail(ErrorKind::fetch,
                  fmt::format("{}: no Packages index of {} could be fetched: {}", label,
                              dir.empty() ? "the repository" : dir, why),
                  "check the network; a re-run resumes what was downloaded");
  if (const auto stanzas = repo::parse_deb822(release); !stanzas.empty())
    if (const auto* until = stanzas.front().get("Valid-Until"))
      snap.notes.push_back(fmt::format("{} is valid until {}: apt on the node refuses the copy after that "
                                       "(make the bundle again)",
                                       inrelease_path, *until));
  std::vector<repo::Package> index;
  std::set<std::string> read_dirs; // one index per directory: the compressions hold the same text
  for (const auto& j : have) {
    const std::string rel = j.name.substr(r.repository.size() + 1);
    snap.files.push_back({rel, j.sha256, *j.size});
    if (!read_dirs.insert(rel.substr(0, rel.rfind('/') + 1)).second) continue;
    std::string text;
    HPCBAKE_TRY(read_index(cache.entry(j.sha256), label + " " + rel, [&](std::string_view chunk, bool) -> Status {
      text.append(chunk);
      if (text.size() > kMaxIndexBytes)
        return fail(ErrorKind::fetch, fmt::format("{} {}: larger than {} MiB", label, rel, kMaxIndexBytes >> 20));
      return {};
    }));
    HPCBAKE_TRY_ASSIGN(auto pkgs, repo::parse_packages(text, env.arch, label + " " + rel));
    index.insert(index.end(), pkgs.begin(), pkgs.end());
  }
  // 4. the closure, reading the preferences that small packages ship as they are chosen
  auto job_of = [&](const repo::Package& p) {
    return fetch::Job{r.repository + "/" + p.filename, {fetch::join_url(r.uri, p.filename)}, p.sha256, p.size};
  };
  std::function<Result<std::vector<repo::Pin>>(const repo::Package&)> inspect =
      [&](const repo::Package& p) -> Result<std::vector<repo::Pin>> {
    if (p.size > kInspectBytes) return std::vector<repo::Pin>{};
    HPCBAKE_TRY(download(env, {job_of(p)}));
    HPCBAKE_TRY_ASSIGN(auto text, deb_preferences(cache.entry(p.sha256)));
    return repo::parse_preferences(text);
  };
  HPCBAKE_TRY_ASSIGN(auto res, repo::resolve(index, requests_of(plan, r.repository, false), {}, inspect));
  // 5. the packages
  std::vector<fetch::Job> debs;
  for (const auto& p : res.selected) {
    debs.push_back(job_of(p));
    snap.files.push_back({p.filename, p.sha256, p.size});
    snap.packages.push_back(p.name + "=" + p.version);
  }
  HPCBAKE_TRY(download(env, debs));
  snap.other = std::move(res.other);
  return snap;
}

Status materialize(const std::vector<plan::MirrorFile>& files, const fetch::Cache& cache, const fs::path& dir) {
  for (const auto& f : files) {
    const fs::path rel(f.path);
    bool safe = !f.path.empty() && rel.is_relative();
    for (const auto& part : rel)
      safe = safe && part != ".." && part != "." && !part.empty();
    if (!safe)
      return fail(ErrorKind::fetch, fmt::format("a bundled repository file '{}' would leave {}", f.path, dir.string()),
                  "the bundle is damaged or not made by 'hpcbake bundle create': make it again");
    const fs::path dst = dir / rel;
    std::error_code ec;
    fs::create_directories(dst.parent_path(), ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("cannot create {}: {}", dst.parent_path().string(), ec.message()));
    for (fs::path d = dst.parent_path(); d.string().size() >= dir.string().size(); d = d.parent_path()) {
      fs::permissions(d,
                      fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                          fs::perms::others_exec,
                      ec);
      if (d == dir) break;
    }
    // Copied, then the copy hashed: what lands is what the bundle listed, whatever the cache does.
    const fs::path src = cache.entry(f.sha256), tmp = dst.string() + ".hpcbake-tmp";
    struct RemoveTmp {
      const fs::path& p;
      ~RemoveTmp() {
        std::error_code e;
        fs::remove(p, e);
      }
    } remove_tmp{tmp};
    fs::copy_file(src, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) {
      std::uint64_t size = 0;
      HPCBAKE_TRY_ASSIGN(auto sha, util::sha256_file(tmp, &size));
      if (sha != f.sha256 || size != f.size)
        return fail(ErrorKind::fetch,
                    fmt::format("{}: the cache entry {} is not what the bundle listed (SHA-256 {}, {} bytes)", f.path,
                                src.string(), sha, size),
                    "run 'hpcbake cache verify', then install again");
    }
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("cannot copy {} to {}: {}", src.string(), tmp.string(), ec.message()));
    fs::permissions(
        tmp, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read, ec);
    fs::rename(tmp, dst, ec);
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("cannot rename {} to {}: {}", tmp.string(), dst.string(), ec.message()));
  }
  return {};
}

} // namespace hpcbake::mirror
