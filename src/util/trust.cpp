#include "util/trust.hpp"

#include <fmt/format.h>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>

namespace hpcbake::util {

namespace fs = std::filesystem;

std::string describe_owner_and_mode(uid_t uid, unsigned mode) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  std::string name;
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) name = found->pw_name;
  return fmt::format("mode {:04o}, owner uid {}{}", mode & 07777, uid, name.empty() ? "" : " (" + name + ")");
}

namespace {

// Where a path sits relative to what is being checked: the sticky exception is only for
// directories above it.
enum class Role { target, inside, above };

const char* who_can_write(mode_t mode) {
  const bool g = mode & S_IWGRP, o = mode & S_IWOTH;
  return g && o ? "group and others" : g ? "its group" : "others";
}

// "/a/b/" -> "/a/b", relative -> absolute, "." folded. ".." is resolved through the file system
// (a link before it is followed, as the kernel does when the path is opened), never lexically:
// "link/.." is the parent of the link's target, not the directory holding the link.
fs::path absolute_normal(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) abs = p;
  const bool dotdot = std::any_of(abs.begin(), abs.end(), [](const fs::path& part) { return part == ".."; });
  if (dotdot) {
    fs::path real = fs::weakly_canonical(abs, ec);
    if (!ec) abs = real;
  }
  abs = abs.lexically_normal();
  if (!abs.has_filename() && abs != abs.root_path()) abs = abs.parent_path();
  return abs;
}

class Checker {
public:
  explicit Checker(const TrustOptions& o) : o_(o) {}

  Status run(const fs::path& path) {
    target_ = absolute_normal(path);
    if (auto s = chain(target_, Role::target); !s) return s;
    if (o_.depth == 0) return {};
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(target_, ec);
    if (ec) return {}; // chain() already refused what cannot be resolved
    return inside(real, o_.depth);
  }

private:
  Status refuse(const fs::path& p, const struct stat& st, const std::string& why, const std::string& fix) {
    return fail(ErrorKind::permission,
                fmt::format("refusing the {} {}: {} {} ({})", o_.what.empty() ? "path" : o_.what, target_.string(),
                            p.string(), why, describe_owner_and_mode(st.st_uid, st.st_mode)),
                fmt::format("whoever can change it decides what hpcbake runs as root. Run '{}'{}", fix,
                            o_.remedy.empty() ? "" : ", " + o_.remedy));
  }

  Status one(const fs::path& p, const struct stat& st, Role role) {
    if (st.st_uid != 0 && st.st_uid != o_.trusted_uid)
      return refuse(p, st,
                    o_.trusted_uid == 0
                        ? "is not owned by root"
                        : fmt::format("is owned neither by root nor by uid {} (who runs hpcbake)", o_.trusted_uid),
                    fmt::format("chown root {}", p.string()));
    if (S_ISLNK(st.st_mode)) return {}; // a link's mode means nothing; its directory is checked
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) == 0) return {};
    if (role == Role::above && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX)) return {};
    return refuse(p, st, fmt::format("is writable by {}", who_can_write(st.st_mode)),
                  fmt::format("chmod go-w {}", p.string()));
  }

  // `p` and every directory above it; then, when links are involved, the resolved chain too.
  Status chain(const fs::path& p, Role role) {
    if (auto s = walk_up(p, role); !s) return s;
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(p, ec);
    if (ec)
      return fail(ErrorKind::permission,
                  fmt::format("refusing the {} {}: {} cannot be resolved: {}", o_.what.empty() ? "path" : o_.what,
                              target_.string(), p.string(), ec.message()),
                  "fix or remove the symbolic link");
    if (real != p) return walk_up(real, role);
    return {};
  }

  Status walk_up(const fs::path& p, Role role) {
    for (fs::path cur = p;; cur = cur.parent_path()) {
      if (seen_.insert(cur.string() + (cur == p && role != Role::above ? "\x01" : "")).second) {
        struct stat st {};
        if (::lstat(cur.c_str(), &st) == 0) {
          if (auto s = one(cur, st, cur == p ? role : Role::above); !s) return s;
        } else if (errno != ENOENT && errno != ENOTDIR) {
          return fail(ErrorKind::internal,
                      fmt::format("{}: cannot check who may change it: {}", cur.string(), std::strerror(errno)));
        }
      }
      if (cur == cur.parent_path()) break;
    }
    return {};
  }

  // What is inside `dir`, `depth` levels down (-1: all), not following links out of it: a link
  // inside is checked itself, then where it leads (with that place's own chain).
  Status inside(const fs::path& dir, int depth) {
    if (!dirs_walked_.insert(dir.string()).second) return {};
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) return {}; // not a directory, or it does not exist
    for (; it != end; it.increment(ec)) {
      const fs::path p = it->path();
      const int level = it.depth() + 1; // 1: directly inside `dir`
      if (depth >= 0 && level >= depth) it.disable_recursion_pending();
      struct stat st {};
      if (::lstat(p.c_str(), &st) != 0) {
        if (errno == ENOENT) continue; // removed meanwhile
        return fail(ErrorKind::internal,
                    fmt::format("{}: cannot check who may change it: {}", p.string(), std::strerror(errno)));
      }
      if (auto s = one(p, st, Role::inside); !s) return s;
      if (S_ISLNK(st.st_mode)) {
        if (++links_ > 40)
          return fail(ErrorKind::permission,
                      fmt::format("{}: too many symbolic links under {}", p.string(), dir.string()),
                      "replace the links with the files themselves");
        fs::path real = fs::weakly_canonical(p, ec);
        if (ec || real == p) {
          // Dangling: whoever may create the place it points to decides what it will read.
          ec.clear();
          const fs::path to = fs::read_symlink(p, ec);
          if (ec)
            return fail(ErrorKind::internal, fmt::format("{}: cannot read the link: {}", p.string(), ec.message()));
          const fs::path where = absolute_normal(to.is_absolute() ? to : p.parent_path() / to);
          if (auto s = chain(where, Role::inside); !s) return s;
          continue;
        }
        if (auto s = chain(real, Role::inside); !s) return s;
        const int left = depth < 0 ? -1 : depth - level;
        if (left != 0)
          if (auto s = inside(real, left); !s) return s;
      }
    }
    // A failed increment leaves the iterator at its end: what was not listed was not checked.
    if (ec) return fail(ErrorKind::internal, fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
    return {};
  }

  const TrustOptions& o_;
  fs::path target_;
  std::set<std::string> seen_, dirs_walked_;
  int links_ = 0;
};

} // namespace

Status check_trusted_path(const fs::path& path, const TrustOptions& options) {
  Checker c(options);
  return c.run(path);
}

Status check_private_file(const fs::path& path, uid_t trusted_uid, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return fail(ErrorKind::internal, fmt::format("{}: cannot check its mode: {}", path.string(), std::strerror(errno)));
  }
  const std::string desc = describe_owner_and_mode(st.st_uid, st.st_mode);
  if (!S_ISREG(st.st_mode))
    return fail(ErrorKind::permission, fmt::format("{} {} is not a regular file ({})", what, path.string(), desc));
  if (st.st_uid != 0 && st.st_uid != trusted_uid)
    return fail(ErrorKind::permission,
                fmt::format("{} {} is not owned by root{} ({})", what, path.string(),
                            trusted_uid == 0 ? "" : fmt::format(" or uid {}", trusted_uid), desc),
                fmt::format("run 'chown root {}' after checking where it came from", path.string()));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return fail(ErrorKind::permission,
                fmt::format("{} {} can be read or changed by {} ({})", what, path.string(),
                            (st.st_mode & S_IRWXG) && (st.st_mode & S_IRWXO) ? "its group and others"
                            : (st.st_mode & S_IRWXG)                         ? "its group"
                                                                             : "others",
                            desc),
                fmt::format("run 'chmod 600 {}'. Anyone who read it can sign kernel modules that machines trusting "
                            "its certificate will load: if that may have happened, make a new key",
                            path.string()));
  return {};
}

} // namespace hpcbake::util
