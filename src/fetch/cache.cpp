#include "fetch/cache.hpp"

#include "util/atomic_file.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace hpcbake::fetch {

namespace fs = std::filesystem;
using util::sync_path;
using util::write_file_atomic;

Cache::Cache(fs::path dir) : dir_(std::move(dir)) {}

Status Cache::ensure_layout() const {
  for (const char* sub : {"sha256", "partial", "quarantine"}) {
    std::error_code ec;
    fs::create_directories(dir_ / sub, ec);
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot create cache directory: {}", (dir_ / sub).string(), ec.message()),
                  "pass --cache DIR on a writable file system");
  }
  return {};
}

bool Cache::has(const std::string& sha256) const {
  std::error_code ec;
  return fs::is_regular_file(entry(sha256), ec);
}

std::optional<PartialInfo> Cache::read_sidecar(const std::string& sha256) const {
  std::ifstream in(sidecar(sha256));
  if (!in) return std::nullopt;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  PartialInfo p;
  p.url = j.value("url", "");
  p.url_digest = j.value("url_sha256", "");
  p.validator = j.value("validator", "");
  return p;
}

Status Cache::write_sidecar(const std::string& sha256, const PartialInfo& info) const {
  nlohmann::json j = {{"url", info.url}, {"url_sha256", info.url_digest}, {"validator", info.validator}};
  return write_file_atomic(sidecar(sha256), j.dump() + "\n");
}

Status Cache::publish(const std::string& sha256) const {
  const fs::path src = part(sha256);
  if (auto s = sync_path(src, O_RDONLY); !s) return s;
  if (::rename(src.c_str(), entry(sha256).c_str()) != 0)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot publish into the cache: {}", entry(sha256).string(), std::strerror(errno)));
  if (auto s = sync_path(dir_ / "sha256", O_RDONLY | O_DIRECTORY); !s) return s;
  std::error_code ec;
  fs::remove(sidecar(sha256), ec);
  return {};
}

Result<fs::path> Cache::quarantine(const std::string& sha256) const {
  for (int n = 0;; ++n) {
    fs::path dest = dir_ / "quarantine" / fmt::format("{}.{}", sha256, n);
    std::error_code ec;
    if (fs::exists(dest, ec)) continue;
    fs::rename(part(sha256), dest, ec);
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot move it to {}: {}", part(sha256).string(), dest.string(), ec.message()),
                  fmt::format("check that {} exists and is writable", (dir_ / "quarantine").string()));
    fs::remove(sidecar(sha256), ec);
    return dest;
  }
}

void Cache::drop_partial(const std::string& sha256) const {
  std::error_code ec;
  fs::remove(part(sha256), ec);
  fs::remove(sidecar(sha256), ec);
}

std::vector<CacheEntry> Cache::list(std::vector<ListProblem>* problems) const {
  std::vector<CacheEntry> out;
  auto skip = [&](const fs::path& p, const std::error_code& why) {
    if (problems && why != std::errc::no_such_file_or_directory) problems->push_back({p, why.message()});
  };
  std::error_code ec;
  for (fs::directory_iterator it(dir_ / "sha256", ec), end; !ec && it != end; it.increment(ec)) {
    // Entries come and go under a running fetch or gc: a vanished one is not an error.
    std::error_code fec;
    const bool regular = it->is_regular_file(fec);
    if (fec) skip(it->path(), fec);
    if (!regular) continue;
    const auto size = it->file_size(fec);
    if (fec) {
      skip(it->path(), fec);
      continue;
    }
    out.push_back({it->path().filename().string(), static_cast<std::uint64_t>(size)});
  }
  if (ec && ec != std::errc::no_such_file_or_directory && problems)
    problems->push_back({dir_ / "sha256", ec.message()});
  std::sort(out.begin(), out.end(), [](const auto& l, const auto& r) { return l.sha256 < r.sha256; });
  return out;
}

std::string VerifyProblem::describe(const fs::path& entry) const {
  const std::string content =
      actual.empty() ? fmt::format("unreadable ({})", read_error) : fmt::format("content hashes to {}", actual);
  if (move_error.empty()) return fmt::format("{}: {}; moved to {}", entry.string(), content, moved_to.string());
  return fmt::format("{}: {}; NOT moved to quarantine ({}): it is still in the cache, remove it by hand",
                     entry.string(), content, move_error);
}

std::vector<VerifyProblem> Cache::verify(int* verified) const {
  std::vector<VerifyProblem> problems;
  int good = 0;
  for (const auto& e : list()) {
    const fs::path path = entry(e.sha256);
    VerifyProblem p{e.sha256, {}, {}, {}, {}};
    auto actual = util::sha256_file(path);
    if (actual && *actual == e.sha256) {
      ++good;
      continue;
    }
    if (actual)
      p.actual = *actual;
    else
      p.read_error = actual.error().message;
    const fs::path dest = dir_ / "quarantine" / (e.sha256 + ".corrupt");
    std::error_code ec;
    fs::rename(path, dest, ec);
    if (ec)
      p.move_error = fmt::format("cannot rename it to {}: {}", dest.string(), ec.message());
    else
      p.moved_to = dest;
    problems.push_back(std::move(p));
  }
  if (verified) *verified = good;
  return problems;
}

namespace {

// The lock of `p` for removal: an exclusive flock taken without waiting, on the file still at
// `p` (a download that re-created it after we opened it holds the new file).
struct RemovalLock {
  enum class State { held, busy, gone, error } state = State::error;
  util::Fd fd;
  std::string error;
};

RemovalLock lock_for_removal(const fs::path& p) {
  RemovalLock l;
  l.fd.reset(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!l.fd) {
    l.state = errno == ENOENT ? RemovalLock::State::gone : RemovalLock::State::error;
    l.error = fmt::format("cannot open it to lock it: {}", std::strerror(errno));
    return l;
  }
  if (::flock(l.fd.get(), LOCK_EX | LOCK_NB) != 0) {
    l.state = errno == EWOULDBLOCK ? RemovalLock::State::busy : RemovalLock::State::error;
    l.error = fmt::format("flock failed: {}", std::strerror(errno));
    return l;
  }
  struct stat held {
  }, now{};
  const bool same = ::fstat(l.fd.get(), &held) == 0 && ::lstat(p.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
                    held.st_dev == now.st_dev;
  l.state = same ? RemovalLock::State::held : RemovalLock::State::busy; // replaced meanwhile: the new file is someone's
  return l;
}

} // namespace

GcResult Cache::gc(const std::set<std::string>& keep) const {
  GcResult r;
  auto drop = [&](const fs::path& p) {
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (fs::remove(p, ec)) {
      r.freed += size == static_cast<std::uintmax_t>(-1) ? 0 : size;
      ++r.removed;
    } else if (ec && ec != std::errc::no_such_file_or_directory) {
      r.skipped.push_back({p, fmt::format("cannot remove it: {}", ec.message())});
    }
  };
  // Removes `p` while holding the lock of `lock_path` (itself, or the .part a sidecar belongs to).
  auto drop_locked = [&](const fs::path& p, const fs::path& lock_path, const char* holder) {
    const RemovalLock lock = lock_for_removal(lock_path);
    switch (lock.state) {
    case RemovalLock::State::held:
      drop(p);
      break;
    case RemovalLock::State::busy:
      r.skipped.push_back({p, holder});
      break;
    case RemovalLock::State::gone:
      if (lock_path != p) drop(p); // a sidecar whose .part is gone
      break;
    case RemovalLock::State::error:
      r.skipped.push_back({p, lock.error});
      break;
    }
  };
  std::error_code ec;
  for (fs::directory_iterator it(dir_ / "partial", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    const fs::path p = it->path();
    const fs::path lock_path = p.extension() == ".json" ? fs::path(p).replace_extension(".part") : p;
    drop_locked(p, lock_path, "skipped: being downloaded by another hpcbake process");
  }
  for (fs::directory_iterator it(dir_ / "quarantine", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) drop(it->path());
  }
  for (const auto& e : list())
    if (!keep.contains(e.sha256))
      drop_locked(entry(e.sha256), entry(e.sha256),
                  "skipped: being read by another hpcbake process (an install or a bundle)");
  return r;
}

Result<util::Fd> Cache::lock_entry_shared(const std::string& sha256) const {
  const fs::path p = entry(sha256);
  util::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd)
    return fail(ErrorKind::fetch, fmt::format("{}: cannot open the cache entry: {}", p.string(), std::strerror(errno)),
                "run 'hpcbake fetch' to download it again");
  while (::flock(fd.get(), LOCK_SH) != 0)
    if (errno != EINTR)
      return fail(ErrorKind::internal, fmt::format("{}: flock failed: {}", p.string(), std::strerror(errno)));
  return fd;
}

} // namespace hpcbake::fetch
