#pragma once
// HostFs: read-only access to the host's files, every path resolved under a root
// directory (`--root`). With root "/" it is the real machine; with a fixture tree it
// is a stand-in machine. Paths passed in are host paths ("/etc/os-release").
//
// Every path is resolved inside the root (util/rootfs.hpp): a symlink's absolute target starts
// again at the root and ".." stops at it, as the host's own kernel would resolve them, so no
// link inside a root can make hpcbake read or write this machine's files. Reads open the file
// with O_NONBLOCK and check that it is a regular file (a FIFO never blocks, a directory is named,
// not thrown at), then read to EOF (sysfs and procfs sizes lie).
#include "util/error.hpp"
#include "util/fd.hpp"

#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::util {

class HostFs {
public:
  explicit HostFs(std::filesystem::path root = "/");

  const std::filesystem::path& root() const { return root_; }
  bool is_real_root() const;

  // Where host_path (absolute) is under the root, for code that needs a path (writers, external
  // commands): its existing part resolved inside the root (no symlink left in it), then the part
  // that does not exist yet. With root "/" the path itself, as given. When it cannot be resolved
  // (a symlink loop, more than 40 links, a file where a directory should be) the path returned
  // names nothing that exists and cannot be created (a component longer than NAME_MAX), so a
  // writer fails rather than go anywhere else; resolve_checked says why.
  std::filesystem::path resolve(std::string_view host_path) const;
  Result<std::filesystem::path> resolve_checked(std::string_view host_path) const;
  // The same for the directory holding host_path, with its last name kept as it is (a symlink
  // there is not followed): for what acts on the entry itself (remove it, make a link there).
  std::filesystem::path resolve_entry(std::string_view host_path) const;
  // root + host_path joined as written ('..' stopping at the root), links not followed: for
  // messages that name the path the user gave, never for I/O.
  std::filesystem::path display(std::string_view host_path) const;
  // host_path opened inside the root with open(2) `flags`; the errno when it cannot be.
  std::expected<Fd, int> open(std::string_view host_path, int flags) const;
  // File content; nullopt when it does not exist (ENOENT, ENOTDIR); an error naming the path when
  // it is not a regular file ("is a directory", "is a FIFO") or cannot be read.
  Result<std::optional<std::string>> read_checked(std::string_view host_path) const;
  // File content, or nullopt when it does not exist, is not a regular file or cannot be read.
  std::optional<std::string> read(std::string_view host_path) const;
  // First line of a sysfs-style attribute file, whitespace-trimmed.
  std::optional<std::string> read_attr(std::string_view host_path) const;
  bool exists(std::string_view host_path) const;
  bool is_dir(std::string_view host_path) const;
  // Sorted entry names of a directory (not recursive); empty when missing.
  std::vector<std::string> list(std::string_view host_path) const;

private:
  std::filesystem::path root_;
  bool real_root_ = true; // root_ is "/" as written: paths are used as given
};

// A whole file read to EOF (sysfs sizes lie), or nullopt when it cannot be read. For paths
// that are not host paths (a key the user named, a make.log); host paths go through HostFs.
std::optional<std::string> read_file(const std::filesystem::path& path);
// The same, saying why when it cannot: the path and the failing call's errno (iostreams set no
// errno, so a caller of read_file cannot report the reason truthfully).
Result<std::string> read_file_or_error(const std::filesystem::path& path);
// A regular file of at most max_bytes (a key, a small config): a FIFO, a device or a larger
// file is an error, never a hang or an unbounded read.
Result<std::string> read_small_file(const std::filesystem::path& path, std::size_t max_bytes);

} // namespace hpcbake::util
