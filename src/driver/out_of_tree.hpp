#pragma once
// The out-of-tree modules of a kernel: every module file under /lib/modules/<kernel> whose
// .modinfo lacks `intree` (ModuleInfo::intree: modpost marks every module built inside the kernel
// tree, and the kernel taints O for the rest). They are what the kernel's own build key does not
// vouch for: DKMS's (NVIDIA's, gdrcopy, nvidia_peermem), and what vendor packages put under
// updates/, extra/, weak-updates/ or even kernel/drivers/ (DOCA-OFED's mlx5_*, ib_*, rdma_*).
// seal checks each one's signer against the keys the kernel trusts (driver/mok.hpp), and
// `hpcbake module trust` shows them. Everything is read under the HostFs root.
#include "driver/modinfo.hpp"
#include "util/hostfs.hpp"

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hpcbake::driver {

// The most directory entries a walk of /lib/modules/<kernel> visits before it stops (and says it
// stopped: a caller refuses rather than vouch for modules it did not read). Our own choice: the
// Debian 6.1 kernel tree this bound was measured on holds 4,921 entries (4,023 modules), and
// distribution kernels with their extra-modules package hold a few thousand more; 100,000 is some
// twenty times that, and a walk of it reads in seconds (docs/benchmarks.md).
inline constexpr std::size_t kMaxModuleTreeEntries = 100000;

struct OutOfTreeModule {
  std::string path;    // host path where the kernel finds it: /lib/modules/<kernel>/updates/dkms/nvidia.ko
  ModuleInfo info;     // empty when `error` is set
  std::string error;   // the file could not be read as a module (then it is not known to be out-of-tree)
  std::string package; // the package that owns the file, when known (owning_packages)
};

struct ModuleTreeScan {
  std::string kernel;
  bool found = false;                   // /lib/modules/<kernel> exists
  std::vector<OutOfTreeModule> modules; // out-of-tree or unreadable modules, by path
  std::size_t entries = 0;              // directory entries visited
  std::size_t module_files = 0;         // module files read (in-tree ones included)
  bool truncated = false;               // stopped at max_entries: the rest was not read
  std::string error;                    // the walk failed part-way (what, and where)
};

// Walks /lib/modules/<kernel> (never build/ or source/, the headers; a directory symlink is never
// followed, so a loop cannot hold it; a file symlink, as RHEL's weak-updates/ has, is followed
// inside the root) and reads each .ko, .ko.xz, .ko.zst and .ko.gz with libkmod, keeping those
// without `intree` and those it cannot read.
ModuleTreeScan out_of_tree_modules(const util::HostFs& host, const std::string& kernel,
                                   std::size_t max_entries = kMaxModuleTreeEntries);

// Fills each module's `package` from dpkg's file lists (/var/lib/dpkg/info/*.list, which name
// /lib/modules/... or /usr/lib/modules/...); returns what it could say about ownership:
// "dpkg" (read: a module no list names was put there by DKMS or by hand), or "" (no dpkg
// database: on rpm systems the owner is not read, and stays unknown).
std::string owning_packages(const util::HostFs& host, std::vector<OutOfTreeModule>& modules);

// The dpkg package whose file list (/var/lib/dpkg/info/*.list) names each of `paths` (absolute,
// as dpkg writes them), architecture qualifier dropped; a path no list names is absent. Empty
// without a dpkg database.
std::map<std::string, std::string> dpkg_owners(const util::HostFs& host, const std::set<std::string>& paths);

} // namespace hpcbake::driver
