#pragma once
// nouveau, the in-kernel open driver, binds NVIDIA GPUs at boot and keeps NVIDIA's driver
// from loading. hpcbake blacklists it in modprobe.d, rebuilds the initramfs of every
// target kernel (nouveau is often loaded from there, before the root file system), and
// says "reboot required" when nouveau is loaded right now: unloading it under a console
// is not safe, and the orchestrator reboots instead.
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "util/hostfs.hpp"

#include <string>
#include <utility>
#include <vector>

namespace hpcbake::driver {

inline constexpr const char* kNouveauBlacklist =
    "# Written by hpcbake: NVIDIA's driver needs the GPU, so nouveau must not bind it.\n"
    "blacklist nouveau\n"
    "options nouveau modeset=0\n";

struct NouveauResult {
  bool changed = false;                       // the blacklist file was written (it differed or was missing)
  std::vector<std::string> initramfs_rebuilt; // kernels
  std::vector<std::string> initramfs_skipped; // kernels whose initramfs holds no nouveau (read, not rebuilt)
  // Kernels whose initramfs holds nouveau and already carries the blacklist as written (read, not
  // rebuilt); one that holds nouveau without it is rebuilt even when the file was in place.
  std::vector<std::string> initramfs_current;
  // Kernels whose initramfs could not be read (a FIFO, past archive::InitramfsLimits, damaged),
  // and why: rebuilt as if it held nouveau.
  std::vector<std::pair<std::string, std::string>> initramfs_unread;
  bool reboot_required = false; // nouveau is loaded now
};

// Writes the distro's blacklist file (atomically, under host's root) when its content
// differs, then runs the distro's initramfs command for each kernel when the file changed,
// when its initramfs holds nouveau without the blacklist (a rebuild that failed in an earlier
// run), or with `force_initramfs`. Without `force_initramfs`, a kernel whose initramfs (the
// distro's initramfs_file) is read and holds no nouveau module is skipped: the blacklist changes
// nothing there; one that holds it and the blacklist as written is current; an initramfs that
// cannot be read is rebuilt (initramfs_unread says why). A failed
// initramfs command is a build error naming the command and its output. A command the runner
// refuses (exec::refusal: under a fixture --root, exec/fixture_root.hpp) is that error, with
// nothing written.
Result<NouveauResult> disable_nouveau(const util::HostFs& host, const manifest::DistroManifest& distro,
                                      const std::vector<std::string>& kernels, exec::Runner& runner,
                                      bool force_initramfs = false);

// The distro's initramfs command for one kernel ("{kernel}" replaced).
std::vector<std::string> initramfs_argv(const manifest::DistroManifest& distro, const std::string& kernel);

} // namespace hpcbake::driver
