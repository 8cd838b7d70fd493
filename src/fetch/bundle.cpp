#include "fetch/bundle.hpp"

#include "manifest/recipes.hpp"

#include "fetch/sha256.hpp"
#include "util/atomic_file.hpp"
#include "util/build_config.hpp"
#include "util/fd.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

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
long entry_time() {
  const char* sde = std::getenv("SOURCE_DATE_EPOCH");
  return sde ? std::strtol(sde, nullptr, 10) : 0;
}

Status write_entry(archive* a, const std::string& name, std::uint64_t size, const std::function<Status(archive*)>& body) {
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

Status write_file_entry(archive* a, const std::string& name, const fs::path& src) {
  std::error_code ec;
  const auto size = fs::file_size(src, ec);
  if (ec) return fail(ErrorKind::internal, fmt::format("bundle: {}: {}", src.string(), ec.message()));
  return write_entry(a, name, size, [&](archive* ar) -> Status {
    const util::Fd fd(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail(ErrorKind::internal, fmt::format("bundle: {}: {}", src.string(), std::strerror(errno)));
    std::vector<char> buf(1 << 20);
    while (true) {
      const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return fail(ErrorKind::internal, fmt::format("bundle: {}: read failed: {}", src.string(), std::strerror(errno)));
      if (n == 0) return {};
      if (archive_write_data(ar, buf.data(), static_cast<std::size_t>(n)) != n)
        return fail(ErrorKind::internal, fmt::format("bundle: writing {}: {}", name, archive_error_string(ar)));
    }
  });
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

Status create_bundle(const fs::path& out, const std::vector<Job>& jobs, const Cache& cache, const fs::path& manifest_dir) {
  nlohmann::json index = {{"schema", 1}, {"created_by", std::string("hpcbake ") + build::version}};
  index["artifacts"] = nlohmann::json::array();
  std::set<std::string> seen;
  for (const auto& j : jobs) {
    if (!cache.has(j.sha256)) return fail(ErrorKind::fetch, fmt::format("bundle: {} is not in the cache", j.name));
    if (!seen.insert(j.sha256).second) continue;
    index["artifacts"].push_back({{"name", j.name}, {"sha256", j.sha256}, {"size", fs::file_size(cache.entry(j.sha256))}});
  }
  const fs::path tmp = out.string() + ".tmp";
  std::unique_ptr<archive, ArchiveWriteFree> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  if (archive_write_open_filename(a.get(), tmp.c_str()) != ARCHIVE_OK)
    return fail(ErrorKind::internal, fmt::format("bundle: cannot create {}: {}", tmp.string(), archive_error_string(a.get())));
  auto cleanup = [&](Error e) {
    a.reset();
    std::error_code ec;
    fs::remove(tmp, ec);
    return std::unexpected(std::move(e));
  };
  const std::string idx = index.dump(2) + "\n";
  if (auto s = write_entry(a.get(), "index.json", idx.size(), [&](archive* ar) -> Status {
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
    if (auto s = write_file_entry(a.get(), "artifacts/" + sha, cache.entry(sha)); !s) return cleanup(s.error());
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK)
    return cleanup(Error{ErrorKind::internal, fmt::format("bundle: closing {}: {}", tmp.string(), archive_error_string(a.get())), {}});
  a.reset();
  // fsync the finished tar, then rename it into place.
  if (auto s = util::sync_path(tmp, O_RDONLY); !s) return cleanup(s.error());
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) return fail(ErrorKind::internal, fmt::format("bundle: cannot rename to {}: {}", out.string(), ec.message()));
  return {};
}

Result<Report> fetch_from_bundle(const fs::path& bundle, const std::vector<Job>& jobs, const Cache& cache, Observer& observer) {
  if (auto s = cache.ensure_layout(); !s) return std::unexpected(s.error());
  Report report;
  std::map<std::string, const Job*> wanted; // sha256 -> job
  for (const auto& j : jobs) {
    if (cache.has(j.sha256)) {
      report.results.push_back({j.name, j.sha256, cache.entry(j.sha256), true, true, 0, {}});
      continue;
    }
    wanted.emplace(j.sha256, &j);
  }
  std::unique_ptr<archive, ArchiveReadFree> a(archive_read_new());
  archive_read_support_format_tar(a.get());
  archive_read_support_filter_all(a.get());
  if (archive_read_open_filename(a.get(), bundle.c_str(), 1 << 20) != ARCHIVE_OK)
    return fail(ErrorKind::fetch, fmt::format("bundle {}: {}", bundle.string(), archive_error_string(a.get())),
                "check the path; a bundle is made by 'hpcbake bundle create'");
  std::map<std::string, std::uint64_t> index_sizes;
  bool have_index = false;
  std::vector<char> buf(1 << 20);
  archive_entry* entry = nullptr;
  int rc = 0;
  while ((rc = archive_read_next_header(a.get(), &entry)) == ARCHIVE_OK) {
    const std::string path = archive_entry_pathname(entry);
    if (path == "index.json") {
      std::string text;
      la_ssize_t n;
      while ((n = archive_read_data(a.get(), buf.data(), buf.size())) > 0 && text.size() < (1u << 24))
        text.append(buf.data(), static_cast<std::size_t>(n));
      auto j = nlohmann::json::parse(text, nullptr, false);
      if (!j.is_object() || !j.contains("artifacts") || !j["artifacts"].is_array())
        return fail(ErrorKind::fetch, fmt::format("bundle {}: index.json is not a bundle index", bundle.string()));
      for (const auto& art : j["artifacts"])
        if (art.is_object() && art.value("sha256", "").size() == 64)
          index_sizes[art["sha256"]] = art.value("size", std::uint64_t{0});
      have_index = true;
      continue;
    }
    if (!path.starts_with("artifacts/") || archive_entry_filetype(entry) != AE_IFREG) continue;
    const std::string sha = path.substr(10);
    auto it = wanted.find(sha);
    if (it == wanted.end()) continue;
    const Job& job = *it->second;
    Event ev;
    ev.name = job.name;
    ev.url = "bundle:" + bundle.filename().string();
    ev.kind = EventKind::started;
    observer.on_event(ev);
    JobResult r{job.name, sha, {}, false, false, 0, {}};
    const fs::path part = cache.part(sha);
    util::Fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) return fail(ErrorKind::fetch, fmt::format("{}: {}", part.string(), std::strerror(errno)));
    Sha256 h;
    std::uint64_t bytes = 0;
    la_ssize_t n;
    bool io_ok = true;
    while ((n = archive_read_data(a.get(), buf.data(), buf.size())) > 0) {
      h.update(buf.data(), static_cast<std::size_t>(n));
      bytes += static_cast<std::uint64_t>(n);
      if (::write(fd.get(), buf.data(), static_cast<std::size_t>(n)) != n) io_ok = false;
    }
    fd.reset();
    const std::string actual = h.hex();
    ev.bytes = bytes;
    if (!io_ok || n < 0) {
      r.error = fmt::format("{}: reading it from bundle {} failed", job.name, bundle.string());
      cache.drop_partial(sha);
    } else if (actual != sha || (job.size && bytes != *job.size)) {
      const auto where = cache.quarantine(sha);
      r.error = fmt::format("{} in bundle {} is tampered or corrupt: expected SHA-256 {}, got {} ({} bytes); kept in {}",
                            job.name, bundle.string(), sha, actual, bytes, where.string());
    } else if (auto s = cache.publish(sha); !s) {
      r.error = s.error().message;
    } else {
      r.ok = true;
      r.path = cache.entry(sha);
    }
    ev.kind = r.ok ? EventKind::finished : EventKind::failed;
    ev.message = r.error;
    observer.on_event(ev);
    report.results.push_back(r);
    wanted.erase(it);
  }
  if (rc != ARCHIVE_EOF)
    return fail(ErrorKind::fetch, fmt::format("bundle {}: {}", bundle.string(), archive_error_string(a.get())),
                "the bundle is truncated or not a tar: fetch it again");
  if (!have_index) return fail(ErrorKind::fetch, fmt::format("bundle {}: no index.json", bundle.string()));
  for (const auto& [sha, job] : wanted)
    report.results.push_back({job->name, sha, {}, false, false, 0,
                              fmt::format("{} (SHA-256 {}) is not in bundle {}", job->name, sha, bundle.string())});
  return report;
}

} // namespace hpcbake::fetch
