#include "util/hostfs.hpp"

#include "util/fd.hpp"
#include "util/file_type.hpp"
#include "util/rootfs.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

namespace hpcbake::util {

HostFs::HostFs(std::filesystem::path root) : root_(std::move(root)) {
  if (root_.empty()) root_ = "/";
  real_root_ = root_.lexically_normal() == "/";
}

bool HostFs::is_real_root() const {
  std::error_code ec;
  return std::filesystem::equivalent(root_, "/", ec);
}

namespace {

std::string describe_errno(int err) {
  if (err == ELOOP) return "too many levels of symbolic links (a loop, or more than 40 links)";
  return std::strerror(err);
}

// The refusal of a file larger than its kind allows; `size` is what is known of it.
Error too_large(const std::string& where, const std::string& size, const FileBound& bound) {
  return Error{ErrorKind::internal,
               fmt::format("{} is {}; {} is at most {}: refusing to read it", where, size, bound.kind,
                           human_bytes(bound.max_bytes)),
               "a real one is far smaller: check what wrote it, and restore it from its package"};
}

// Reads an open regular file to EOF (sysfs and procfs report sizes that are not the content's),
// never more than bound.max_bytes + 1 bytes: one more than the bound tells a larger file.
Result<std::string> read_to_eof(int fd, const std::string& where, const FileBound& bound) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0 && static_cast<std::uint64_t>(st.st_size) > bound.max_bytes)
    return std::unexpected(too_large(where, human_bytes(static_cast<std::uint64_t>(st.st_size)), bound));
  std::string content;
  char buf[64 * 1024];
  while (true) {
    const std::size_t want = std::min(sizeof buf, bound.max_bytes + 1 - content.size());
    const ssize_t n = ::read(fd, buf, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorKind::internal, fmt::format("{}: read failed: {}", where, std::strerror(errno)),
                  "check the file and the disk (dmesg may show I/O errors)");
    if (n == 0) return content;
    content.append(buf, static_cast<std::size_t>(n));
    if (content.size() > bound.max_bytes)
      return std::unexpected(too_large(where, "more than " + human_bytes(bound.max_bytes), bound));
  }
}

// An open file that must be a regular one: the error names what it is instead.
Status check_regular(int fd, const std::string& where) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: cannot stat: {}", where, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return fail(ErrorKind::internal, fmt::format("{}: is {}, not a regular file", where, file_type_name(st.st_mode)),
                "replace it with the file it should be, or remove it");
  return {};
}

} // namespace

std::filesystem::path HostFs::display(std::string_view host_path) const {
  if (real_root_) return std::filesystem::path(host_path);
  std::filesystem::path out = root_;
  for (const auto& part : std::filesystem::path(host_path).relative_path().lexically_normal())
    if (part != ".." && part != "." && !part.empty()) out /= part;
  return out;
}

Result<std::filesystem::path> HostFs::resolve_checked(std::string_view host_path) const {
  if (real_root_) return std::filesystem::path(host_path);
  const Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return display(host_path); // no root yet: nothing in it to follow
  auto rel = resolve_in_root(root.get(), host_path);
  if (!rel)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot be resolved inside the root {}: {}", display(host_path).string(),
                            root_.string(), describe_errno(rel.error())),
                "fix or remove the symbolic link (or the file standing where a directory should be)");
  return rel->empty() ? root_ : root_ / *rel;
}

std::filesystem::path HostFs::resolve(std::string_view host_path) const {
  if (auto p = resolve_checked(host_path)) return *p;
  // Longer than NAME_MAX: every system call on it fails (ENAMETOOLONG), mkdir included, so a
  // writer given this path stops with an error naming it instead of writing anywhere.
  std::string poison = "hpcbake-cannot-resolve-this-path-inside-the-root-";
  poison.resize(NAME_MAX + 1, '-');
  return root_ / poison / std::filesystem::path(host_path).relative_path();
}

std::filesystem::path HostFs::resolve_entry(std::string_view host_path) const {
  const std::filesystem::path p(host_path);
  const auto name = p.filename();
  if (real_root_ || name.empty() || name == "." || name == "..") return resolve(host_path);
  return resolve(p.parent_path().string()) / name;
}

std::expected<Fd, int> HostFs::open(std::string_view host_path, int flags) const {
  // The real root: the host's own resolution is the in-root one, as resolve() says; one open(2),
  // and an emulator that maps "/" to a sysroot (qemu-user -L) still reads the host's /proc.
  if (real_root_) {
    const std::string p = host_path.starts_with('/') ? std::string(host_path) : "/" + std::string(host_path);
    Fd fd(::open(p.c_str(), flags | O_CLOEXEC));
    if (!fd) return std::unexpected(errno);
    return fd;
  }
  const Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return std::unexpected(errno);
  return open_in_root(root.get(), host_path, flags);
}

Result<std::optional<std::string>> HostFs::read_checked(std::string_view host_path, FileBound bound) const {
  auto fd = open(host_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  const std::string where = display(host_path).string();
  if (!fd) {
    if (fd.error() == ENOENT || fd.error() == ENOTDIR) return std::nullopt;
    return fail(ErrorKind::internal, fmt::format("{}: cannot open: {}", where, describe_errno(fd.error())),
                fd.error() == EACCES ? "run as root" : "check the path and the symbolic links on it");
  }
  HPCBAKE_TRY(check_regular(fd->get(), where));
  HPCBAKE_TRY_ASSIGN(auto content, read_to_eof(fd->get(), where, bound));
  return content;
}

std::optional<std::string> read_file(const std::filesystem::path& path) {
  auto content = read_file_or_error(path);
  if (!content) return std::nullopt;
  return std::move(*content);
}

Result<std::string> read_file_or_error(const std::filesystem::path& path) {
  // Not a host file: a file the user named or one hpcbake wrote, sized by what it holds.
  constexpr FileBound unbounded{std::numeric_limits<std::size_t>::max() - 1, "a file"};
  return read_file_bounded(path, unbounded);
}

Result<std::string> read_file_bounded(const std::filesystem::path& path, FileBound bound) {
  // O_NONBLOCK: a FIFO opens at once (and is then refused) instead of waiting for a writer.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                "check that it exists and that hpcbake may read it (run as root?)");
  HPCBAKE_TRY(check_regular(fd.get(), path.string()));
  return read_to_eof(fd.get(), path.string(), bound);
}

Result<std::string> read_small_file(const std::filesystem::path& path, std::size_t max_bytes) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                "check that it exists and that hpcbake may read it (run as root?)");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: fstat failed: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return fail(ErrorKind::internal,
                fmt::format("{}: is {}, not a regular file", path.string(), file_type_name(st.st_mode)));
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return fail(ErrorKind::internal,
                fmt::format("{}: {} bytes, more than the {} expected", path.string(), st.st_size, max_bytes));
  std::string content;
  char buf[16 * 1024];
  while (content.size() <= max_bytes) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorKind::internal, fmt::format("{}: read failed: {}", path.string(), std::strerror(errno)));
    if (n == 0) return content;
    content.append(buf, static_cast<std::size_t>(n));
  }
  return fail(ErrorKind::internal, fmt::format("{}: grew past {} bytes while being read", path.string(), max_bytes));
}

std::optional<std::string> HostFs::read(std::string_view host_path, FileBound bound) const {
  auto content = read_checked(host_path, bound);
  if (!content) return std::nullopt;
  return std::move(*content);
}

std::optional<std::string> HostFs::read_attr(std::string_view host_path, FileBound bound) const {
  auto content = read(host_path, bound);
  if (!content) return std::nullopt;
  std::string_view first = *content;
  if (auto nl = first.find('\n'); nl != std::string_view::npos) first = first.substr(0, nl);
  return std::string(trim(first));
}

bool HostFs::exists(std::string_view host_path) const {
  return open(host_path, O_PATH | O_CLOEXEC).has_value();
}

bool HostFs::is_dir(std::string_view host_path) const {
  return open(host_path, O_PATH | O_DIRECTORY | O_CLOEXEC).has_value();
}

std::vector<std::string> HostFs::list(std::string_view host_path) const {
  std::vector<std::string> names;
  auto fd = open(host_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!fd) return names;
  DIR* dir = ::fdopendir(fd->get());
  if (!dir) return names;
  (void)fd->release(); // the DIR owns it now
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace hpcbake::util
