#include "util/atomic_file.hpp"

#include "util/fd.hpp"
#include "util/test_hooks.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace hpcbake::util {

namespace fs = std::filesystem;

Status sync_path(const fs::path& p, int flags) {
  Fd fd(::open(p.c_str(), flags | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("{}: cannot open for fsync: {}", p.string(), std::strerror(errno)));
  const int rc = ::fsync(fd.get());
  if (rc != 0) return fail(ErrorKind::internal, fmt::format("{}: fsync failed: {}", p.string(), std::strerror(errno)));
  return {};
}

void crash_point(std::string_view name) {
  if (name.empty()) return;
  if (test_hook(TestHook::crash_point) == name) ::raise(SIGKILL);
}

int remove_stale_pid_entries(const fs::path& dir, std::string_view prefix) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    const std::size_t digits = rest.find_first_not_of("0123456789");
    const std::string_view pid_text = rest.substr(0, digits);
    if (pid_text.empty() || pid_text.size() > 9 || (digits != std::string_view::npos && rest[digits] != '.')) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(std::string(pid_text)));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue; // alive (or not ours to judge): keep
    std::error_code rm;
    if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
  }
  return removed;
}

Status write_file_atomic(const fs::path& path, const std::string& content, unsigned mode) {
  AtomicWriteOptions opts;
  opts.mode = mode;
  return write_file_atomic(path, content, opts);
}

Status write_file_atomic(const fs::path& path, const std::string& content, const AtomicWriteOptions& opts) {
  const unsigned mode = opts.mode;
  // A process killed between creating its temp file and the rename left it behind.
  remove_stale_pid_entries(path.parent_path(), path.filename().string() + ".tmp.");
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  // A fresh file, never one left behind (by a crash of an earlier process with this pid) or
  // planted: O_TRUNC would keep such a file's mode and owner, and a link would be followed.
  ::unlink(tmp.c_str());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return fail(ErrorKind::internal, fmt::format("{}: cannot create: {}", tmp.string(), std::strerror(errno)));
  // The exact mode before the first byte: a private key is never, even briefly, in a file the
  // umask left wider or narrower than asked.
  if (opts.exact_mode && ::fchmod(fd.get(), mode) != 0) {
    const int e = errno;
    fd.reset();
    ::unlink(tmp.c_str());
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot set mode {:04o}: {}", tmp.string(), mode, std::strerror(e)));
  }
  std::size_t off = 0;
  while (off < content.size()) {
    const ssize_t n = ::write(fd.get(), content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      fd.reset();
      ::unlink(tmp.c_str());
      return fail(ErrorKind::internal, fmt::format("{}: write failed: {}", tmp.string(), std::strerror(e)));
    }
    off += static_cast<std::size_t>(n);
  }
  if (opts.owner && ::fchown(fd.get(), opts.owner->first, opts.owner->second) != 0) {
    const int e = errno;
    fd.reset();
    ::unlink(tmp.c_str());
    return fail(ErrorKind::internal, fmt::format("{}: cannot set the owner: {}", tmp.string(), std::strerror(e)));
  }
  if (::fsync(fd.get()) != 0 || fd.close() != 0) {
    const int e = errno;
    fd.reset();
    ::unlink(tmp.c_str());
    return fail(ErrorKind::internal, fmt::format("{}: fsync failed: {}", tmp.string(), std::strerror(e)));
  }
  // The temp file is complete and durable; the rename below is the commit point.
  crash_point(opts.crash_point);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return fail(ErrorKind::internal, fmt::format("{}: rename failed: {}", path.string(), std::strerror(e)));
  }
  return sync_path(path.parent_path(), O_RDONLY | O_DIRECTORY);
}

} // namespace hpcbake::util
