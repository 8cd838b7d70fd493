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

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::archive {

struct InitramfsModules {
  std::vector<std::string> modules; // module names as the files are named ("nouveau", "nvidia-drm"), sorted
  int archives = 0;                 // the cpio archives read, those inside the compressed part too
};

// Reads every archive of the file, and every archive inside its compressed part (the kernel
// unpacks cpio archives one after another there too). Any doubt is an error (a truncated header,
// an unknown compression, data after the compressed part): the caller then rebuilds, as if the
// module were there.
Result<InitramfsModules> initramfs_modules(const std::filesystem::path& file);

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
InitramfsCheck check_initramfs(const std::filesystem::path& file, const std::vector<std::string>& wanted);

} // namespace hpcbake::archive
