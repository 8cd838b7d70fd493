#include "fetch/bundle.hpp"

#include "manifest/recipes.hpp"

#include "util/atomic_file.hpp"
#include "util/build_config.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>

namespace hpcbake::fetch {

namespace fs = std::filesystem;

namespace {

struct ArchiveWriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ArchiveReadFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

// Reproducible bundles: every entry gets SOURCE_DATE_EPOCH (or 0) as its time.
std::int64_t entry_time() {
  return util::source_date_epoch().value_or(0);
}

Status write_entry(archive* a, const std::string& name, std::uint64_t size,
                   const std::function<Status(archive*)>& body) {
  std::unique_ptr<archive_entry, EntryFree> e(archive_entry_new());
  archive_entry_set_pathname(e.get(), name.c_str());
  archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
  archive_entry_set_filetype(e.get(), AE_IFREG);
  archive_entry_set_perm(e.get(), 0644);
  archive_entry_set_mtime(e.get(), entry_time(), 0);
  if (archive_write_header(a, e.get()) != ARCHIVE_OK)
    return fail(ErrorKind::internal, fmt::format("bundle: cannot write {}: {}", name, archive_error_string(a)));
  return body(a);
}

// Copies `src` into the tar as `name`. The size in the entry's header is the one of the file
// we opened (fstat), and exactly that many bytes follow it: a file that shrinks while it is
// copied (something changed it underneath) is an error naming it, never a torn entry.
Status write_file_entry(archive* a, const std::string& name, const fs::path& src) {
  const util::Fd fd(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("bundle: cannot open {}: {}", src.string(), std::strerror(errno)),
                "check that it exists and is readable, then run 'bundle create' again");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(ErrorKind::internal, fmt::format("bundle: cannot stat {}: {}", src.string(), std::strerror(errno)));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  return write_entry(a, name, size, [&](archive* ar) -> Status {
    std::vector<char> buf(1 << 20);
    std::uint64_t done = 0;
    while (done < size) {
      const ssize_t n =
          ::read(fd.get(), buf.data(), static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - done)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return fail(ErrorKind::internal, fmt::format("bundle: {}: read failed: {}", src.string(), std::strerror(errno)),
                    "check the disk (dmesg may show I/O errors), then run 'bundle create' again");
      if (n == 0)
        return fail(ErrorKind::internal,
                    fmt::format("bundle: {} shrank from {} to {} bytes while it was copied", src.string(), size, done),
                    "something changed it during 'bundle create': run it again when nothing else writes there");
      if (archive_write_data(ar, buf.data(), static_cast<std::size_t>(n)) != n)
        return fail(ErrorKind::internal, fmt::format("bundle: writing {}: {}", name, archive_error_string(ar)));
      done += static_cast<std::uint64_t>(n);
    }
    return {};
  });
}

// Writes all of `data`, retrying EINTR and short writes; 0, or the errno of the failure.
int write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t w = ::write(fd, data, size);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    data += w;
    size -= static_cast<std::size_t>(w);
  }
  return 0;
}

} // namespace

namespace {

// The regular files under dir (only *.yaml when yaml_only), sorted; a listing error is an
// error, never an exception or a silently shorter bundle.
Result<std::vector<fs::path>> data_files(const fs::path& dir, bool yaml_only) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code tec;
    if (it->is_regular_file(tec) && (!yaml_only || it->path().extension() == ".yaml")) files.push_back(it->path());
  }
  if (ec) return fail(ErrorKind::internal, fmt::format("bundle: cannot list {}: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

Status create_bundle(const fs::path& out, const std::vector<Job>& jobs, const Cache& cache,
                     const fs::path& manifest_dir, const nlohmann::json& repositories,
                     const nlohmann::json& git_sources) {
  nlohmann::json index = {{"schema", 1}, {"created_by", std::string("hpcbake ") + build::version}};
  index["repositories"] = repositories;
  index["git_sources"] = git_sources;
  index["artifacts"] = nlohmann::json::array();
  std::set<std::string> seen;
  for (const auto& j : jobs) {
    if (!cache.has(j.sha256))
      return fail(ErrorKind::fetch,
                  fmt::format("bundle: {} ({}) is not in the cache {}", j.name, j.sha256, cache.dir().string()),
                  "run 'hpcbake fetch' with the same options first, then 'bundle create'");
    if (!seen.insert(j.sha256).second) continue;
    // The cache may change under us (a gc, a fetch): a vanished entry is reported, not thrown.
    std::error_code ec;
    const auto size = fs::file_size(cache.entry(j.sha256), ec);
    if (ec)
      return fail(ErrorKind::fetch,
                  fmt::format("bundle: {} ({}): {}", j.name, cache.entry(j.sha256).string(), ec.message()),
                  "the cache changed while the bundle was made: run 'hpcbake fetch' again, then 'bundle create'");
    index["artifacts"].push_back({{"name", j.name}, {"sha256", j.sha256}, {"size", size}});
  }
  const fs::path tmp = out.string() + ".tmp";
  std::unique_ptr<archive, ArchiveWriteFree> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  if (archive_write_open_filename(a.get(), tmp.c_str()) != ARCHIVE_OK)
    return fail(ErrorKind::internal,
                fmt::format("bundle: cannot create {}: {}", tmp.string(), archive_error_string(a.get())));
  auto cleanup = [&](Error e) {
    a.reset();
    std::error_code ec;
    fs::remove(tmp, ec);
    return std::unexpected(std::move(e));
  };
  const std::string idx = util::dump_json(index, 2) + "\n";
  if (auto s = write_entry(a.get(), "index.json", idx.size(),
                           [&](archive* ar) -> Status {
                             if (archive_write_data(ar, idx.data(), idx.size()) != static_cast<la_ssize_t>(idx.size()))
                               return fail(ErrorKind::internal, "bundle: writing index.json failed");
                             return {};
                           });
      !s)
    return cleanup(s.error());
  // The manifest set: manifests/ (its YAML) and the driver recipes beside it (drivers/, with
  // the dkms.conf template), so an offline install plans from exactly what was bundled.
  const std::pair<fs::path, std::string> sets[] = {{manifest_dir, "manifests/"},
                                                   {manifest::recipes_dir(manifest_dir), "drivers/"}};
  for (const auto& [dir, prefix] : sets) {
    auto files = data_files(dir, prefix == "manifests/");
    if (!files) return cleanup(files.error());
    for (const auto& f : *files)
      if (auto s = write_file_entry(a.get(), prefix + f.lexically_relative(dir).string(), f); !s)
        return cleanup(s.error());
  }
  for (const auto& art : index["artifacts"]) {
    const std::string sha = art["sha256"];
    // Held while the entry is copied, so a `cache gc` beside us skips it.
    auto lock = cache.lock_entry_shared(sha);
    if (!lock) return cleanup(lock.error());
    if (auto s = write_file_entry(a.get(), "artifacts/" + sha, cache.entry(sha)); !s) return cleanup(s.error());
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK)
    return cleanup(Error{
        ErrorKind::internal, fmt::format("bundle: closing {}: {}", tmp.string(), archive_error_string(a.get())), {}});
  a.reset();
  // fsync the finished tar, then rename it into place.
  if (auto s = util::sync_path(tmp, O_RDONLY); !s) return cleanup(s.error());
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) return fail(ErrorKind::internal, fmt::format("bundle: cannot rename to {}: {}", out.string(), ec.message()));
  return {};
}

namespace {

// Reads the current member, index.json: the artifacts it lists, by SHA-256, with their sizes.
// Reads the current member, index.json: a bundle index (an object with an "artifacts" list), or
// an error saying the file is not one. Larger than 16 MiB is refused as such, never cut short.
Result<nlohmann::json> index_json(archive* a, const fs::path& bundle, std::vector<char>& buf) {
  constexpr std::size_t kMax = 16u << 20;
  std::string text;
  la_ssize_t n;
  while ((n = archive_read_data(a, buf.data(), buf.size())) > 0) {
    text.append(buf.data(), static_cast<std::size_t>(n));
    if (text.size() > kMax)
      return fail(ErrorKind::fetch, fmt::format("bundle {}: index.json is larger than 16 MiB", bundle.string()),
                  "the file is not a bundle made by 'hpcbake bundle create', or it is damaged: make it again");
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("artifacts") || !j["artifacts"].is_array())
    return fail(ErrorKind::fetch, fmt::format("bundle {}: index.json is not a bundle index", bundle.string()),
                "the file is not a bundle made by 'hpcbake bundle create', or it is damaged: make it again");
  return j;
}

// The artifacts index.json lists, by SHA-256, with their sizes.
Result<std::map<std::string, std::uint64_t>> read_index(archive* a, const fs::path& bundle, std::vector<char>& buf) {
  HPCBAKE_TRY_ASSIGN(auto j, index_json(a, bundle, buf));
  std::map<std::string, std::uint64_t> sizes;
  for (const auto& art : j["artifacts"])
    if (const std::string sha = util::string_member(art, "sha256"); util::is_sha256_hex(sha))
      sizes[sha] = static_cast<std::uint64_t>(std::max(0LL, util::int_member(art, "size", 0)));
  return sizes;
}

// Streams the current member (artifacts/<sha>) into the cache's .part, hashing it, and
// publishes it only when its digest and size match the job. Per-job failures are in the result;
// an error is returned only when the .part cannot be created at all.
Result<JobResult> copy_member(archive* a, const fs::path& bundle, const Job& job, const Cache& cache,
                              std::vector<char>& buf, Event& ev) {
  const std::string& sha = job.sha256;
  JobResult r{job.name, sha, {}, false, false, 0, {}};
  const fs::path part = cache.part(sha);
  util::Fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd)
    return fail(ErrorKind::fetch, fmt::format("{}: cannot create: {}", part.string(), std::strerror(errno)),
                fmt::format("check that {} is writable", part.parent_path().string()));
  util::Sha256 h;
  std::uint64_t bytes = 0;
  la_ssize_t n;
  int write_errno = 0; // errno of the first failed write or close, taken where it failed
  while ((n = archive_read_data(a, buf.data(), buf.size())) > 0) {
    static_cast<void>(h.update(buf.data(), static_cast<std::size_t>(n))); // a failure sticks: hex() reports it
    bytes += static_cast<std::uint64_t>(n);
    if (write_errno == 0) write_errno = write_all(fd.get(), buf.data(), static_cast<std::size_t>(n));
  }
  if (fd.close() != 0 && write_errno == 0) write_errno = errno;
  auto digest = h.hex();
  const std::string actual = digest.value_or("");
  ev.bytes = bytes;
  if (write_errno != 0 || n < 0) {
    r.error = n < 0
                  ? fmt::format("{}: reading it from bundle {} failed: {}", job.name, bundle.string(),
                                archive_error_string(a))
                  : fmt::format("{}: writing it to {} failed: {}", job.name, part.string(), std::strerror(write_errno));
    cache.drop_partial(sha);
  } else if (!digest) {
    r.error = fmt::format("{}: {}", job.name, digest.error().message);
    cache.drop_partial(sha);
  } else if (actual != sha || (job.size && bytes != *job.size)) {
    const auto where = cache.quarantine(sha);
    const std::string kept =
        where ? fmt::format("kept in {}", where->string()) : fmt::format("not kept ({})", where.error().message);
    if (!where) cache.drop_partial(sha);
    r.error = fmt::format("{} in bundle {} is tampered or corrupt: expected SHA-256 {}, got {} ({} bytes); {}",
                          job.name, bundle.string(), sha, actual, bytes, kept);
  } else if (auto s = cache.publish(sha); !s) {
    r.error = s.error().message;
  } else {
    r.ok = true;
    r.path = cache.entry(sha);
  }
  return r;
}

// The bundle's tar, open for reading from its first member.
Result<std::unique_ptr<archive, ArchiveReadFree>> open_bundle(const fs::path& bundle) {
  std::unique_ptr<archive, ArchiveReadFree> a(archive_read_new());
  archive_read_support_format_tar(a.get());
  archive_read_support_filter_all(a.get());
  if (archive_read_open_filename(a.get(), bundle.c_str(), 1 << 20) != ARCHIVE_OK)
    return fail(ErrorKind::fetch, fmt::format("bundle {}: {}", bundle.string(), archive_error_string(a.get())),
                "check the path; a bundle is made by 'hpcbake bundle create'");
  return a;
}

} // namespace

namespace {

// A list member of the bundle's index.json (an empty array when the index has none).
Result<nlohmann::json> index_list(const fs::path& bundle, const char* key) {
  HPCBAKE_TRY_ASSIGN(auto a, open_bundle(bundle));
  archive_entry* entry = nullptr;
  while (archive_read_next_header(a.get(), &entry) == ARCHIVE_OK) {
    if (std::string(archive_entry_pathname(entry)) != "index.json") continue;
    std::vector<char> buf(1 << 16);
    HPCBAKE_TRY_ASSIGN(auto j, index_json(a.get(), bundle, buf));
    auto list = j.value(key, nlohmann::json::array());
    if (!list.is_array())
      return fail(ErrorKind::fetch, fmt::format("bundle {}: index.json's {} is not a list", bundle.string(), key),
                  "make the bundle again with 'hpcbake bundle create'");
    return list;
  }
  return fail(ErrorKind::fetch, fmt::format("bundle {}: no index.json", bundle.string()),
              "the file is not a bundle made by 'hpcbake bundle create': make it again");
}

} // namespace

Result<nlohmann::json> bundle_repositories(const fs::path& bundle) {
  return index_list(bundle, "repositories");
}

Result<nlohmann::json> bundle_git_sources(const fs::path& bundle) {
  return index_list(bundle, "git_sources");
}

Result<Report> fetch_from_bundle(const fs::path& bundle, const std::vector<Job>& jobs, const Cache& cache,
                                 Observer& observer) {
  HPCBAKE_TRY(cache.ensure_layout());
  Report report;
  std::map<std::string, const Job*> wanted; // sha256 -> job
  for (const auto& j : jobs) {
    if (cache.has(j.sha256)) {
      const EntryCheck c = cache.check_entry(j.sha256, j.size);
      if (c.ok) {
        report.results.push_back({j.name, j.sha256, cache.entry(j.sha256), true, true, 0, {}});
        continue;
      }
      Event ev;
      ev.kind = EventKind::restarted;
      ev.name = j.name;
      ev.message = fmt::format("the cached copy does not match: {}; taking it from the bundle again", c.problem);
      observer.on_event(ev);
    }
    wanted.emplace(j.sha256, &j);
  }
  HPCBAKE_TRY_ASSIGN(auto a, open_bundle(bundle));
  bool have_index = false;
  std::vector<char> buf(1 << 20);
  archive_entry* entry = nullptr;
  int rc = 0;
  while ((rc = archive_read_next_header(a.get(), &entry)) == ARCHIVE_OK) {
    const std::string path = archive_entry_pathname(entry);
    if (path == "index.json") {
      HPCBAKE_TRY(read_index(a.get(), bundle, buf));
      have_index = true;
      continue;
    }
    if (!path.starts_with("artifacts/") || archive_entry_filetype(entry) != AE_IFREG) continue;
    auto it = wanted.find(path.substr(10));
    if (it == wanted.end()) continue;
    const Job& job = *it->second;
    Event ev;
    ev.name = job.name;
    ev.url = "bundle:" + bundle.filename().string();
    ev.kind = EventKind::started;
    observer.on_event(ev);
    HPCBAKE_TRY_ASSIGN(const JobResult r, copy_member(a.get(), bundle, job, cache, buf, ev));
    ev.kind = r.ok ? EventKind::finished : EventKind::failed;
    ev.message = r.error;
    observer.on_event(ev);
    report.results.push_back(r);
    wanted.erase(it);
  }
  if (rc != ARCHIVE_EOF)
    return fail(ErrorKind::fetch, fmt::format("bundle {}: {}", bundle.string(), archive_error_string(a.get())),
                "the bundle is truncated or not a tar: fetch it again");
  if (!have_index)
    return fail(ErrorKind::fetch, fmt::format("bundle {}: no index.json", bundle.string()),
                "the file is not a bundle made by 'hpcbake bundle create': make it again");
  for (const auto& [sha, job] : wanted)
    report.results.push_back({job->name,
                              sha,
                              {},
                              false,
                              false,
                              0,
                              fmt::format("{} (SHA-256 {}) is not in bundle {}", job->name, sha, bundle.string())});
  give_twins_results(jobs, report.results); // jobs sharing a SHA-256 were read once
  return report;
}

} // namespace hpcbake::fetch
