#pragma once
// Kernels: the running one, the installed ones, and the one the machine will boot
// next. A driver built only for the running kernel is the most common way GPU
// machines break after an update, so plans target running + next-boot.
//
// The next-boot rule, in order:
//  1. BLS entries (/boot/loader/entries/*.conf, RHEL 8+): the entry grubenv's
//     next_entry or saved_entry names; without one, the newest entry by version
//     (GRUB's BLS sort order).
//  2. GRUB without BLS (Debian, Ubuntu): with GRUB_DEFAULT=saved, the kernel whose
//     release appears in grubenv's next_entry/saved_entry; with GRUB_DEFAULT=0 or
//     unset, the newest installed kernel (grub-mkconfig lists kernels newest first).
//  3. Otherwise: the newest installed kernel.
// "Installed" means /boot/vmlinuz-<release> exists; when /boot holds no kernel
// (containers), the directories of /lib/modules stand in.
#include "util/hostfs.hpp"

#include <string>
#include <vector>

namespace hpcbake::detect {

struct KernelFacts {
  std::string running; // empty when unknown
  std::string running_source;
  std::vector<std::string> installed; // newest first
  std::string installed_source;
  std::vector<std::string> module_dirs; // /lib/modules/* entries, newest first
  std::string next_boot;                // empty when no kernel is installed
  std::string next_boot_rule;           // which rule decided, with the file it read
  std::vector<std::string> warnings;

  // running and next-boot, deduplicated, running first.
  std::vector<std::string> targets() const;
};

KernelFacts detect_kernels(const util::HostFs& host);

} // namespace hpcbake::detect
