// The userspace --root resolver (util::open_in_root's walk, util::resolve_in_root): the only one
// used on kernels before 5.6 (RHEL 8's 4.18), where a fixture tree or a mounted image given as
// --root must never make hpcbake reach this machine's files. Differential: the input builds a
// small tree in a scratch root, and each path it asks for is resolved by the walk and by the
// kernel's own openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS (this machine has it), with
// the same open flags. Properties: both agree (the same inode, or the same errno); what the walk
// opens is inside the scratch root; resolve_in_root answers names with no "", "." or ".." part
// and, for a path that exists, names that lead to the same inode without following any link.
//
// Input: lines "d NAME" (a directory), "f NAME" (an empty file), "l NAME TARGET" (a symlink),
// then "p PATH" (open with O_PATH), "r PATH" (O_RDONLY) or "D PATH" (O_RDONLY | O_DIRECTORY).
// NAMEs are made inside the root with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS) on the parent,
// so building the tree cannot follow a link it made. A directory "outside" beside the root, with a
// file, gives an escape something to find.
#include "fuzz_util.hpp"
#include "util/rootfs.hpp"
#include "util/strings.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

using namespace hpcbake_fuzz;
using hpcbake::util::Fd;

namespace {

const fs::path& root_dir() {
  static const fs::path dir = [] {
    const fs::path top = scratch() / "rootfs";
    std::error_code ec;
    fs::create_directories(top / "outside" / "etc", ec);
    write_file(top / "outside" / "etc" / "shadow", "outside the root\n");
    return top / "root";
  }();
  return dir;
}

int kernel_open(int root_fd, const std::string& path, int flags, std::uint64_t resolve) {
  struct open_how how {};
  how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
  how.resolve = resolve;
  for (;;) {
    const long fd = ::syscall(__NR_openat2, root_fd, path.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN) return static_cast<int>(fd);
  }
}

// Makes NAME (with `make` on its parent) inside the root without following any link.
template <class Make> void make_in_root(int root_fd, std::string_view name, Make make) {
  const auto slash = name.rfind('/');
  const std::string parent = slash == std::string_view::npos ? "." : std::string(name.substr(0, slash));
  const std::string leaf(slash == std::string_view::npos ? name : name.substr(slash + 1));
  if (leaf.empty() || leaf == "." || leaf == "..") return;
  const int dir =
      kernel_open(root_fd, parent.empty() ? "." : parent, O_PATH | O_DIRECTORY, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS);
  if (dir < 0) return;
  make(dir, leaf.c_str());
  ::close(dir);
}

bool same_file(int a, int b) {
  struct stat x {
  }, y{};
  return ::fstat(a, &x) == 0 && ::fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

std::string where(int fd) {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf.data(), buf.size());
  buf.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return buf;
}

// Whether this kernel has openat2 (5.6 on) and lets this process call it (a container's seccomp
// filter may answer ENOSYS or EPERM): where not, only the walk's own properties are checked.
bool have_openat2(int root_fd) {
  static const bool have = [&] {
    const int fd = kernel_open(root_fd, ".", O_PATH, RESOLVE_IN_ROOT);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }();
  return have;
}

void query(int root_fd, const std::string& path, int flags) {
  auto w = hpcbake::util::open_in_root(root_fd, path, flags);
  if (!have_openat2(root_fd)) {
    if (w) {
      const std::string at = where(w->get()), root = root_dir().string();
      check(at == root || at.starts_with(root + "/"), "'" + path + "': the walk opened " + at + ", outside the root");
    }
    return;
  }
  const int k = kernel_open(root_fd, path, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
  const int kernel_errno = k < 0 ? errno : 0;
  Fd kfd(k);
  const std::string what = "'" + path + "' (flags " + std::to_string(flags) + "): kernel ";
  const std::string kernel_says = k >= 0 ? "opens it" : std::strerror(kernel_errno);
  if (!w) {
    check(k < 0 && kernel_errno == w.error(), what + kernel_says + ", the walk fails with " + std::strerror(w.error()));
  } else {
    check(k >= 0, what + kernel_says + ", the walk opens " + where(w->get()));
    check(same_file(kfd.get(), w->get()), what + "opens " + where(k) + ", the walk " + where(w->get()));
    const std::string at = where(w->get());
    const std::string root = root_dir().string();
    check(at == root || at.starts_with(root + "/"), what + "the walk opened " + at + ", outside the root");
  }
  auto r = hpcbake::util::resolve_in_root(root_fd, path);
  if (!r) return;
  if (!r->empty())
    for (const auto part : hpcbake::util::split(*r, '/'))
      check(!part.empty() && part != "." && part != "..", "resolve_in_root answered '" + *r + "' for " + what);
  if (k < 0) return;
  const int again = kernel_open(root_fd, r->empty() ? "." : *r, flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
  Fd afd(again);
  check(again >= 0 && same_file(again, kfd.get()),
        "resolve_in_root answered '" + *r + "' for " + what + "opens another file or none");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return -1;
  const fs::path& root = root_dir();
  remove_tree(root);
  std::error_code ec;
  fs::create_directory(root, ec);
  if (ec) die("cannot create " + root.string());
  Fd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) die("cannot open " + root.string());
  hpcbake::util::set_in_root_resolver_for_tests(hpcbake::util::InRootResolver::walk);
  int lines = 0, queries = 0;
  for (const auto line : hpcbake::util::split(as_text(data, size), '\n')) {
    if (++lines > 64 || line.size() < 3 || line[1] != ' ') continue;
    const std::string_view arg = line.substr(2);
    if (arg.find('\0') != std::string_view::npos) continue;
    switch (line[0]) {
    case 'd':
      make_in_root(root_fd.get(), arg, [](int dir, const char* leaf) { ::mkdirat(dir, leaf, 0755); });
      break;
    case 'f':
      make_in_root(root_fd.get(), arg, [](int dir, const char* leaf) {
        const int fd = ::openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) ::close(fd);
      });
      break;
    case 'l': {
      const auto space = arg.find(' ');
      if (space == std::string_view::npos) break;
      const std::string target(arg.substr(space + 1));
      make_in_root(root_fd.get(), arg.substr(0, space),
                   [&](int dir, const char* leaf) { ::symlinkat(target.c_str(), dir, leaf); });
      break;
    }
    case 'p':
    case 'r':
    case 'D':
      if (++queries > 8) break;
      query(root_fd.get(), std::string(arg),
            line[0] == 'p'   ? O_PATH
            : line[0] == 'r' ? O_RDONLY
                             : O_RDONLY | O_DIRECTORY);
      break;
    default:
      break;
    }
  }
  return 0;
}
