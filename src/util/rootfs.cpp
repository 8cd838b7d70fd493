#include "util/rootfs.hpp"

#include "util/test_hooks.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hpcbake::util {

namespace {

// -1: no test has chosen, the environment decides; 0: automatic; 1: the walk.
std::atomic<int> g_forced_walk{-1};
// Set once openat2 answered ENOSYS: this kernel has none, so every later call walks at once.
std::atomic<bool> g_no_openat2{false};

bool walk_forced() {
  const int forced = g_forced_walk.load();
  if (forced >= 0) return forced == 1;
  static const bool from_hook = test_hook(TestHook::rootfs_walk) == "1";
  return from_hook;
}

// Puts the components of `path` in front of what is still to walk, in order.
void push_front_components(std::deque<std::string>& todo, std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t slash = path.find('/', start);
    const std::size_t end = slash == std::string_view::npos ? path.size() : slash;
    parts.emplace_back(path.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  todo.insert(todo.begin(), parts.begin(), parts.end());
}

// The target of the symlink open as `fd` (O_PATH | O_NOFOLLOW), whatever its length.
std::expected<std::string, int> read_link(int fd) {
  std::string buf(256, '\0');
  while (true) {
    const ssize_t n = ::readlinkat(fd, "", buf.data(), buf.size());
    if (n < 0) return std::unexpected(errno);
    if (static_cast<std::size_t>(n) < buf.size()) {
      buf.resize(static_cast<std::size_t>(n));
      return buf;
    }
    if (buf.size() >= 64 * 1024) return std::unexpected(ENAMETOOLONG);
    buf.resize(buf.size() * 2);
  }
}

// What a walk found: the directories below the root it stands in (each open O_PATH, with its
// name), then the final component when that is not a directory, then what does not exist.
struct Walked {
  std::vector<std::pair<Fd, std::string>> dirs;
  std::string last;
  std::vector<std::string> missing;
};

enum class Missing { fail, keep };

// The userspace resolution: 0, or the errno at which it stopped.
int walk(int root_fd, std::string_view path, Missing on_missing, Walked& w) {
  std::deque<std::string> todo;
  push_front_components(todo, path);
  int links = 0;
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    if (name.empty() || name == ".") continue;
    if (!w.missing.empty()) { // below a missing directory: only names, and ".." undoing them
      if (name == "..")
        w.missing.pop_back();
      else
        w.missing.push_back(std::move(name));
      continue;
    }
    if (name == "..") { // the parent of what was walked: never above the root
      if (!w.dirs.empty()) w.dirs.pop_back();
      continue;
    }
    const int at = w.dirs.empty() ? root_fd : w.dirs.back().first.get();
    Fd fd(::openat(at, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT && on_missing == Missing::keep) {
        w.missing.push_back(std::move(name));
        continue;
      }
      return errno;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return errno;
    if (S_ISLNK(st.st_mode)) {
      if (++links > kMaxSymlinks) return ELOOP;
      auto target = read_link(fd.get());
      if (!target) return target.error();
      if (target->empty()) return ENOENT;
      if (target->front() == '/') w.dirs.clear(); // absolute: from the root again
      push_front_components(todo, *target);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      w.dirs.emplace_back(std::move(fd), std::move(name));
      continue;
    }
    if (!todo.empty()) return ENOTDIR; // "file/x", "file/", "file/.." as the kernel sees them
    w.last = std::move(name);
  }
  return 0;
}

std::expected<Fd, int> open_by_walk(int root_fd, std::string_view path, int flags) {
  Walked w;
  if (const int err = walk(root_fd, path, Missing::fail, w); err != 0) return std::unexpected(err);
  const int at = w.dirs.empty() ? root_fd : w.dirs.back().first.get();
  // The last name was not a symlink a moment ago: O_NOFOLLOW keeps a link swapped in since from
  // being followed with the host's semantics.
  Fd fd(w.last.empty() ? ::openat(at, ".", flags | O_CLOEXEC)
                       : ::openat(at, w.last.c_str(), flags | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return std::unexpected(errno);
  return fd;
}

} // namespace

void set_in_root_resolver_for_tests(InRootResolver resolver) {
  g_forced_walk = resolver == InRootResolver::walk ? 1 : 0;
}

std::expected<Fd, int> open_in_root(int root_fd, std::string_view path, int flags) {
  if (path.empty()) return std::unexpected(ENOENT); // as open(2) says for ""
  if (!walk_forced() && !g_no_openat2.load()) {
    struct open_how how {};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    const std::string p(path);
    // EAGAIN: a rename or mount under the root raced the lookup, and the kernel asks for a retry.
    for (int attempt = 0; attempt < 16; ++attempt) {
      const long fd = ::syscall(__NR_openat2, root_fd, p.c_str(), &how, sizeof how);
      if (fd >= 0) return Fd(static_cast<int>(fd));
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == ENOSYS) {
        g_no_openat2 = true; // a kernel before 5.6: walk from now on
        break;
      }
      if (errno == EPERM) break; // a seccomp filter refusing the call, or a real EPERM the walk reports too
      return std::unexpected(errno);
    }
  }
  return open_by_walk(root_fd, path, flags);
}

std::expected<std::string, int> resolve_in_root(int root_fd, std::string_view path) {
  Walked w;
  if (const int err = walk(root_fd, path, Missing::keep, w); err != 0) return std::unexpected(err);
  std::string out;
  auto add = [&out](const std::string& name) {
    if (!out.empty()) out += '/';
    out += name;
  };
  for (const auto& d : w.dirs)
    add(d.second);
  if (!w.last.empty()) add(w.last);
  for (const auto& m : w.missing)
    add(m);
  return out;
}

} // namespace hpcbake::util
