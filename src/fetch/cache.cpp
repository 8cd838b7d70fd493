#include "fetch/cache.hpp"

#include "util/atomic_file.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

namespace hpcbake::fetch {

namespace fs = std::filesystem;
using util::sync_path;
using util::write_file_atomic;

namespace {

// At most `limit` bytes of a /proc file (their size reads as 0, so they are read to EOF).
std::string read_proc(const fs::path& p, std::size_t limit) {
  util::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  if (!fd) return out;
  out.resize(limit);
  std::size_t got = 0;
  while (got < limit) {
    const ssize_t n = ::read(fd.get(), out.data() + got, limit - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

} // namespace

std::string flock_holder(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  // /proc/locks, one lock a line (fs/locks.c, lock_get_status):
  //   "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a waiter's line has "->" after the id.
  // Lines are about 60 bytes: 1 MiB, our own generous bound, holds some 17000 locks; past it
  // the holder is not named.
  const std::string locks = read_proc("/proc/locks", 1 << 20);
  const std::string file = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino);
  std::size_t pos = 0;
  while (pos < locks.size()) {
    const std::size_t end = std::min(locks.find('\n', pos), locks.size());
    std::vector<std::string_view> f;
    for (std::string_view rest(locks.data() + pos, end - pos); !rest.empty();) {
      const std::size_t sp = rest.find(' ');
      if (sp != 0) f.push_back(rest.substr(0, sp));
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    }
    pos = end + 1;
    if (f.size() < 6 || f[1] != "FLOCK" || f[5] != file) continue;
    const std::string pid(f[4]);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return {};
    // A task's comm is at most TASK_COMM_LEN (16) bytes, its newline included.
    std::string comm = read_proc(fs::path("/proc") / pid / "comm", 64);
    while (!comm.empty() && (comm.back() == '\n' || comm.back() == ' '))
      comm.pop_back();
    for (auto& c : comm)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return comm.empty() ? fmt::format(" (held by pid {})", pid) : fmt::format(" (held by pid {}, {})", pid, comm);
  }
  return {};
}

Cache::Cache(fs::path dir, std::uint64_t quarantine_budget)
    : dir_(std::move(dir)), quarantine_budget_(quarantine_budget) {}

Status Cache::ensure_layout() const {
  for (const char* sub : {"sha256", "partial", "quarantine", "verified"}) {
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
  p.url = util::string_member(j, "url");
  p.url_digest = util::string_member(j, "url_sha256");
  p.validator = util::string_member(j, "validator");
  return p;
}

Status Cache::write_sidecar(const std::string& sha256, const PartialInfo& info) const {
  nlohmann::json j = {{"url", info.url}, {"url_sha256", info.url_digest}, {"validator", info.validator}};
  return write_file_atomic(sidecar(sha256), util::dump_json(j) + "\n");
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
  record_verified(sha256);
  return {};
}

namespace {

// What an entry looks like on disk: a change to its bytes changes its mtime or ctime (ctime
// cannot be set back by hand), a replacement its inode.
std::string fingerprint(const struct stat& st) {
  return fmt::format("{} {}.{:09} {}.{:09} {} {}\n", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     st.st_ctim.tv_sec, st.st_ctim.tv_nsec, st.st_ino, st.st_dev);
}

std::string read_record(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  return line + "\n";
}

// Hashes the file behind `fd`; its fingerprint when it did not change while being hashed.
Result<std::pair<std::string, std::string>> hash_fd(int fd, const fs::path& p) {
  struct stat before {
  }, after{};
  if (::fstat(fd, &before) != 0)
    return fail(ErrorKind::fetch, fmt::format("{}: fstat failed: {}", p.string(), std::strerror(errno)));
  util::Sha256 h;
  HPCBAKE_TRY(h.update_from_fd(fd, p.string()));
  HPCBAKE_TRY_ASSIGN(auto hex, h.hex());
  const bool same = ::fstat(fd, &after) == 0 && fingerprint(before) == fingerprint(after);
  return std::pair{hex, same ? fingerprint(after) : std::string()};
}

} // namespace

void Cache::record_verified(const std::string& sha256) const {
  struct stat st {};
  if (::stat(entry(sha256).c_str(), &st) != 0) return;
  std::error_code ec;
  fs::create_directories(dir_ / "verified", ec);
  // Best effort: without a record, the next use hashes the entry again.
  (void)write_file_atomic(verified_record(sha256), fingerprint(st));
}

EntryCheck Cache::check_entry(const std::string& sha256, std::optional<std::uint64_t> size) const {
  EntryCheck c;
  const fs::path p = entry(sha256);
  util::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  std::string wrong;
  if (!fd || ::fstat(fd.get(), &st) != 0) {
    wrong = fmt::format("cannot open it: {}", std::strerror(errno));
  } else if (size && static_cast<std::uint64_t>(st.st_size) != *size) {
    wrong = fmt::format("it is {} bytes, the pinned size is {}", st.st_size, *size);
  } else if (read_record(verified_record(sha256)) == fingerprint(st)) {
    c.ok = true;
    return c;
  } else {
    c.rehashed = true;
    auto hashed = hash_fd(fd.get(), p);
    if (hashed && hashed->first == sha256) {
      if (!hashed->second.empty()) (void)write_file_atomic(verified_record(sha256), hashed->second);
      c.ok = true;
      return c;
    }
    wrong = hashed ? fmt::format("it changed since it was verified and hashes to {}", hashed->first)
                   : fmt::format("it cannot be read: {}", hashed.error().message);
  }
  fd.reset();
  std::error_code ec;
  fs::remove(verified_record(sha256), ec);
  auto where = move_to_quarantine(p, sha256, "corrupt");
  if (!where) fs::remove(p, ec); // a download replaces it either way
  c.problem = fmt::format("{}: {}; {}", p.string(), wrong,
                          where ? fmt::format("moved to {}", where->string())
                                : fmt::format("removed ({})", where.error().message));
  return c;
}

Result<fs::path> Cache::move_to_quarantine(const fs::path& from, const std::string& sha256, const char* suffix) const {
  const fs::path qdir = dir_ / "quarantine";
  const fs::path dest = qdir / fmt::format("{}.{}", sha256, suffix);
  std::error_code ec;
  fs::rename(from, dest, ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot move it to {}: {}", from.string(), dest.string(), ec.message()),
                fmt::format("check that {} exists and is writable", qdir.string()));
  ::utimensat(AT_FDCWD, dest.c_str(), nullptr, 0); // its age in quarantine/ starts now
  // One copy per digest, the newest; then the budget, oldest first, this copy last.
  struct Held {
    fs::path path;
    std::uintmax_t size;
    fs::file_time_type mtime;
  };
  std::vector<Held> held;
  std::uintmax_t total = 0;
  for (fs::directory_iterator it(qdir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    const fs::path p = it->path();
    if (p != dest && p.filename().string().starts_with(sha256 + ".")) {
      fs::remove(p, fec);
      continue;
    }
    const auto size = it->file_size(fec);
    const auto mtime = fec ? fs::file_time_type::min() : it->last_write_time(fec);
    if (fec) continue;
    held.push_back({p, size, p == dest ? fs::file_time_type::max() : mtime});
    total += size;
  }
  std::sort(held.begin(), held.end(), [](const Held& l, const Held& r) { return l.mtime < r.mtime; });
  for (const auto& h : held) {
    if (total <= quarantine_budget_) break;
    fs::remove(h.path, ec);
    total -= h.size;
    if (h.path == dest)
      return fail(ErrorKind::fetch,
                  fmt::format("{}: {} bytes, larger than the quarantine budget of {} bytes: removed, not kept",
                              dest.string(), h.size, quarantine_budget_),
                  "raise --quarantine-budget to keep such files for inspection");
  }
  return dest;
}

Result<fs::path> Cache::quarantine(const std::string& sha256) const {
  auto where = move_to_quarantine(part(sha256), sha256, "download");
  std::error_code ec;
  if (where || !fs::exists(part(sha256), ec)) fs::remove(sidecar(sha256), ec);
  return where;
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
  if (removed) return fmt::format("{}: {}; removed ({})", entry.string(), content, move_error);
  return fmt::format("{}: {}; NOT moved to quarantine ({}): it is still in the cache, remove it by hand",
                     entry.string(), content, move_error);
}

std::vector<VerifyProblem> Cache::verify(int* verified) const {
  std::vector<VerifyProblem> problems;
  int good = 0;
  for (const auto& e : list()) {
    const fs::path path = entry(e.sha256);
    VerifyProblem p{e.sha256, {}, {}, {}, {}, false};
    auto actual = util::sha256_file(path);
    if (actual && *actual == e.sha256) {
      record_verified(e.sha256);
      ++good;
      continue;
    }
    if (actual)
      p.actual = *actual;
    else
      p.read_error = actual.error().message;
    std::error_code ec;
    fs::remove(verified_record(e.sha256), ec);
    auto moved = move_to_quarantine(path, e.sha256, "corrupt");
    if (moved) {
      p.moved_to = *moved;
    } else {
      p.move_error = moved.error().message;
      p.removed = !fs::exists(path, ec); // moved, then over the budget
    }
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
  // Records of entries no longer there (not counted: they are bookkeeping, not files of the user's).
  for (fs::directory_iterator it(dir_ / "verified", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (!fs::exists(entry(it->path().filename().string()), fec)) fs::remove(it->path(), fec);
  }
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
