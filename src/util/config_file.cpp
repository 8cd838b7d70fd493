#include "util/config_file.hpp"

#include "util/atomic_file.hpp"
#include "util/fd.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace hpcbake::util {

namespace fs = std::filesystem;

Result<fs::path> follow_links(const HostFs& host, std::string_view host_path) {
  return host.resolve_checked(host_path);
}

Result<bool> create_once(const fs::path& path, const std::string& content, const struct stat& like) {
  // A crash's leftover first: a process killed between the link and the unlink below made the
  // backup and left its temp file, which an early return would keep for good.
  remove_stale_pid_entries(path.parent_path(), path.filename().string() + ".tmp.");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return false;
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return fail(ErrorKind::internal, fmt::format("{}: cannot create: {}", tmp.string(), std::strerror(errno)));
  bool ok = true;
  for (std::size_t off = 0; ok && off < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      ok = false;
    else
      off += static_cast<std::size_t>(n);
  }
  ok = ok && ::fchmod(fd.get(), like.st_mode & 07777) == 0;
  if (ok && ::geteuid() == 0) ok = ::fchown(fd.get(), like.st_uid, like.st_gid) == 0;
  ok = ok && ::fsync(fd.get()) == 0;
  const int err = errno;
  fd.reset();
  if (!ok) {
    ::unlink(tmp.c_str());
    return fail(ErrorKind::internal, fmt::format("{}: cannot write the backup: {}", tmp.string(), std::strerror(err)));
  }
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int link_err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && link_err == EEXIST) return false;
  if (rc != 0)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot create the backup: {}", path.string(), std::strerror(link_err)));
  HPCBAKE_TRY(sync_path(path.parent_path(), O_RDONLY | O_DIRECTORY));
  return true;
}

Result<CurrentFile> read_current(const fs::path& path, FileBound bound) {
  CurrentFile cur;
  cur.path = path;
  if (::stat(path.c_str(), &cur.st) == 0) {
    cur.exists = true;
    // Read with errno kept: an ifstream would leave it unset and the reason untold.
    HPCBAKE_TRY_ASSIGN(cur.text, read_file_bounded(path, bound));
    return cur;
  }
  if (errno != ENOENT)
    return fail(ErrorKind::internal, fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno)),
                "run as root, or check the path's directories");
  cur.st.st_mode = S_IFREG | 0644;
  cur.st.st_uid = ::geteuid();
  cur.st.st_gid = ::getegid();
  return cur;
}

Status check_writable(const CurrentFile& cur, const std::string& wanted) {
  const fs::path dir = cur.path.parent_path();
  std::error_code ec;
  if (!cur.exists) {
    fs::create_directories(dir, ec);
  } else if ((cur.st.st_mode & 0222) == 0 || ::access(cur.path.c_str(), W_OK) != 0) {
    const std::string why = (cur.st.st_mode & 0222) == 0
                                ? fmt::format("it is read-only (mode {:04o})", cur.st.st_mode & 07777)
                                : std::string(std::strerror(errno));
    return fail(ErrorKind::internal, fmt::format("{}: cannot edit: {}; nothing changed", cur.path.string(), why),
                fmt::format("make it writable (chmod u+w {}) and run again, or set {} there yourself",
                            cur.path.string(), wanted));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fail(
        ErrorKind::internal,
        fmt::format(
            "{}: cannot write in the directory (the new file is renamed into place from there): {}; nothing changed",
            dir.string(), std::strerror(errno)),
        fmt::format("run as root, or set {} in {} yourself", wanted, cur.path.string()));
  return {};
}

Result<EditWrite> write_edited(const CurrentFile& cur, const fs::path& backup, const std::string& edited,
                               const std::string& crash_point) {
  EditWrite w;
  std::error_code ec;
  if (cur.exists) {
    HPCBAKE_TRY_ASSIGN(w.backup_created, create_once(backup, cur.text, cur.st));
    w.backup = backup;
  } else if (fs::exists(backup, ec)) {
    w.backup = backup;
  }
  AtomicWriteOptions wo;
  wo.mode = cur.st.st_mode & 07777;
  wo.exact_mode = true;
  if (::geteuid() == 0) wo.owner = std::make_pair(cur.st.st_uid, cur.st.st_gid);
  wo.crash_point = crash_point;
  if (auto s = write_file_atomic(cur.path, edited, wo); !s) {
    if (w.backup_created) fs::remove(backup, ec); // it equals the untouched original: leave nothing behind
    return std::unexpected(s.error());
  }
  return w;
}

} // namespace hpcbake::util
