#pragma once
// HostFs: read-only access to the host's files, every path resolved under a root
// directory (`--root`). With root "/" it is the real machine; with a fixture tree it
// is a stand-in machine. Paths passed in are host paths ("/etc/os-release").
#include "util/error.hpp"

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

  // root + host_path; host_path must be absolute.
  std::filesystem::path resolve(std::string_view host_path) const;
  // File content, or nullopt when it does not exist or cannot be read.
  std::optional<std::string> read(std::string_view host_path) const;
  // First line of a sysfs-style attribute file, whitespace-trimmed.
  std::optional<std::string> read_attr(std::string_view host_path) const;
  bool exists(std::string_view host_path) const;
  bool is_dir(std::string_view host_path) const;
  // Sorted entry names of a directory (not recursive); empty when missing.
  std::vector<std::string> list(std::string_view host_path) const;

private:
  std::filesystem::path root_;
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
