#pragma once
// What kernel modules an initramfs holds, read natively, so that a rebuild can be skipped when
// it would change nothing: blacklisting nouveau (or setting the nvidia module's options) matters
// in the initramfs only when that module is packed in it.
//
// The formats read are the kernel's (Documentation/driver-api/early-userspace/buffer-format.rst):
// one or more cpio "newc" archives (magic 070701 or 070702) one after another, NUL-padded, the
// last of which may be compressed (gzip, xz, zstd, lz4, bzip2, lzma). update-initramfs and dracut
// both write an uncompressed early cpio (CPU microcode) first, then the compressed main one.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::archive {

struct InitramfsModules {
  std::vector<std::string> modules; // module names as the files are named ("nouveau", "nvidia-drm"), sorted
  int archives = 0;                 // the cpio archives read, those inside the compressed part too
  // The content of the regular files asked for by path (InitramfsLimits::files), as the last
  // archive holding each has it (the kernel unpacks them in order, a later one replaces an
  // earlier one); a file asked for and absent has no key.
  std::map<std::string, std::string> files;
};

// How much of an initramfs is read before it is given up on (an error: the caller rebuilds).
// The kernel's format sets no limit, so both are our own choice, generous against real files: the
// Debian 12 initramfs of this project's CI machine (initramfs-tools MODULES=most, the default) is
// 30 MB, unpacks to 130 MB and holds 1182 entries; dracut's and Ubuntu's with all firmware are of
// the same order. 2 GiB is about 16 times that; reading a stream of zeros up to it costs about
// 1 s of CPU (zstd, measured on the CI machine), where an unbounded 64 GiB one cost 50 s per kernel.
struct InitramfsLimits {
  std::uint64_t max_bytes = std::uint64_t{2} << 30; // the file, and its compressed part unpacked, each
  std::uint64_t max_entries = 1 << 20;              // cpio entries in all (about 900 times 1182)
  // Files whose content is wanted, as paths in the image ("etc/modprobe.d/blacklist-nouveau.conf";
  // a leading "/" or "./" is ignored, in these and in the archive's names). At most
  // kMaxWantedFile bytes of each are kept: a larger one is an error (any doubt rebuilds).
  std::vector<std::string> files;
  static constexpr std::uint64_t kMaxWantedFile = 64 * 1024; // our choice: modprobe.d files are a few lines
};

// Reads every archive of the file, and every archive inside its compressed part (the kernel
// unpacks cpio archives one after another there too). Any doubt is an error (a truncated header,
// an unknown compression, data after the compressed part, more than `limits` allow): the caller
// then rebuilds, as if the module were there. Only a regular file is read: a FIFO, a device or a
// directory is named at once, never opened for reading or waited on (O_NONBLOCK, then fstat).
Result<InitramfsModules> initramfs_modules(const std::filesystem::path& file, const InitramfsLimits& limits = {});
// The same for a host path under `host`'s root (util/rootfs.hpp: links resolved inside the root).
Result<InitramfsModules> initramfs_modules(const util::HostFs& host, std::string_view host_path,
                                           const InitramfsLimits& limits = {});

// The module names of `held` that `wanted` asks about: a wanted name matches itself and its
// family ("nvidia" matches "nvidia", "nvidia-drm" and "nvidia_uvm").
std::vector<std::string> initramfs_matches(const InitramfsModules& held, const std::vector<std::string>& wanted);

// The rebuild decision of every caller: the initramfs read, and which of `wanted` it holds. A
// rebuild is needed unless the file was read and holds none of them; any doubt rebuilds.
struct InitramfsCheck {
  Result<InitramfsModules> held;
  std::vector<std::string> found; // initramfs_matches, when read
  bool needed() const { return !held || !found.empty(); }
};
InitramfsCheck check_initramfs(const util::HostFs& host, std::string_view host_path,
                               const std::vector<std::string>& wanted, const InitramfsLimits& limits = {});

} // namespace hpcbake::archive
