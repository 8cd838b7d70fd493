#pragma once
// HostFs: read-only access to the host's files, every path resolved under a root
// directory (`--root`). With root "/" it is the real machine; with a fixture tree it
// is a stand-in machine. Paths passed in are host paths ("/etc/os-release").
//
// Every path is resolved inside the root (util/rootfs.hpp): a symlink's absolute target starts
// again at the root and ".." stops at it, as the host's own kernel would resolve them, so no
// link inside a root can make hpcbake read or write this machine's files. Reads open the file
// with O_NONBLOCK and check that it is a regular file (a FIFO never blocks, a directory is named,
// not thrown at), then read to EOF (sysfs and procfs sizes lie) but never past the bound its kind
// of file has (host_file:: below): a 3 GiB sparse os-release is refused by name, not read.
#include "util/error.hpp"
#include "util/fd.hpp"

#include <expected>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::util {

// The most bytes hpcbake reads of one kind of host file, and the kind's name for the message that
// refuses a larger one ("an os-release file is at most 64.0 KiB").
struct FileBound {
  std::size_t max_bytes;
  const char* kind;
};

// Every kind of host file hpcbake reads, with its bound and the reason for it (docs/security.md,
// "Bounds"). Where a format sets a limit the bound is derived from it; elsewhere it is our own
// choice, stated as such: far above any real file, far below what would cost the machine memory.
namespace host_file {
// sysfs: a show() routine fills one page, "The buffer will always be PAGE_SIZE bytes in length"
// (the kernel's Documentation/filesystems/sysfs.rst): 4 KiB on x86_64, up to 64 KiB on arm64
// kernels built with 64 KiB pages. The procfs values read the same way (kernel/osrelease: 64
// bytes, __NEW_UTS_LEN; random/boot_id: a 36-character UUID) and /run/systemd/container (one
// word systemd writes) are smaller still.
inline constexpr FileBound attribute{64 * 1024, "a sysfs or procfs attribute"};
// efivarfs: 4 attribute bytes and the variable's data. UEFI sets no size per variable; firmware
// keeps all of them in one flash store of a few hundred KiB. Our generous choice: 1 MiB.
inline constexpr FileBound efi_variable{1024 * 1024, "an EFI variable"};
// /proc/modules: one line (about 100 bytes) per loaded module, so it grows with the modules
// loaded. Our generous choice: 16 MiB, more than 100,000 modules.
inline constexpr FileBound proc_modules{16 * 1024 * 1024, "/proc/modules"};
// /proc/cpuinfo, /proc/meminfo and /proc/net's tables (route, if_inet6, fib_trie): they grow with
// the logical CPUs (about 1.5 KiB each in cpuinfo: some 150 KiB for 96), routes and addresses.
// Our generous choice: 16 MiB.
inline constexpr FileBound proc_table{16 * 1024 * 1024, "a /proc table"};
// /proc/PID/environ: execve(2) ("Limits on size of arguments and environment") allows argv and
// the environment together a quarter of the stack limit (2 MiB with the usual 8 MiB); our
// choice, 16 MiB, leaves room for a raised stack limit.
inline constexpr FileBound proc_environ{16 * 1024 * 1024, "a process environment"};
// os-release(5) sets no size; real ones are under 1 KiB. Our generous choice: 64 KiB.
inline constexpr FileBound os_release{64 * 1024, "an os-release file"};
// A Boot Loader Specification entry: a few "key value" lines, the longest the kernel command line
// (COMMAND_LINE_SIZE, 2 to 4 KiB by architecture). Our generous choice: 64 KiB.
inline constexpr FileBound bls_entry{64 * 1024, "a boot loader entry"};
// grubenv: grub-editenv makes a 1024-byte block; our choice, 64 KiB, allows a hand-enlarged one.
inline constexpr FileBound grubenv{64 * 1024, "a GRUB environment block"};
// A configuration file of a few settings (waagent.conf, /etc/default/grub, modprobe.d and
// modules-load.d files, versionlock lists, a CDI spec, a container engine's config, hpcbake's own
// records under the root): real ones are a few KiB (waagent.conf about 5 KiB). Our generous
// choice: 1 MiB.
inline constexpr FileBound config{1024 * 1024, "a configuration file"};
// /boot/config-<kernel>: about 300 KiB for a distribution kernel. Our generous choice: 16 MiB.
inline constexpr FileBound kernel_config{16 * 1024 * 1024, "a kernel configuration"};
// /var/lib/dpkg/status: grows with the packages installed, a few KiB each (about 3 MiB for
// 1,500 packages). Our generous choice: 256 MiB, some 100,000 packages.
inline constexpr FileBound dpkg_status{256 * 1024 * 1024, "a dpkg status database"};
} // namespace host_file

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
  // it is not a regular file ("is a directory", "is a FIFO"), holds more than bound.max_bytes
  // ("... is 3.0 GiB; an os-release file is at most 64.0 KiB: refusing to read it": at most
  // max_bytes + 1 bytes are read) or cannot be read. The default bound is a configuration
  // file's; every reader in src/ names its kind (a test may rely on the default).
  Result<std::optional<std::string>> read_checked(std::string_view host_path,
                                                  FileBound bound = host_file::config) const;
  // File content, or nullopt when it does not exist, is not a regular file, is larger than its
  // bound or cannot be read.
  std::optional<std::string> read(std::string_view host_path, FileBound bound = host_file::config) const;
  // First line of a sysfs-style attribute file, whitespace-trimmed.
  std::optional<std::string> read_attr(std::string_view host_path, FileBound bound = host_file::attribute) const;
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
// The same for a file of a kind with a bound (a host file reached through a resolved path): a
// larger one is refused naming it and its size, reading at most one byte past the bound.
Result<std::string> read_file_bounded(const std::filesystem::path& path, FileBound bound);
// A regular file of at most max_bytes (a key, a small config): a FIFO, a device or a larger
// file is an error, never a hang or an unbounded read.
Result<std::string> read_small_file(const std::filesystem::path& path, std::size_t max_bytes);

} // namespace hpcbake::util
