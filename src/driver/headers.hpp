#pragma once
// Kernel headers for every target kernel: the distro manifest's pattern names the package
// (linux-headers-{kernel}, kernel-devel-{kernel}); what counts is /lib/modules/K/build
// existing afterwards, since that is where DKMS and Kbuild look.
#include "manifest/manifests.hpp"
#include "pkg/manager.hpp"
#include "util/hostfs.hpp"

#include <string>
#include <vector>

namespace hpcbake::driver {

std::string headers_package(const manifest::DistroManifest& distro, const std::string& kernel);

// Installs, in one package-manager call, the headers of each kernel that lacks
// /lib/modules/K/build, then checks every kernel again. Returns the packages it installed.
Result<std::vector<std::string>> ensure_headers(const util::HostFs& host, const manifest::DistroManifest& distro,
                                                const std::vector<std::string>& kernels, pkg::PackageManager& packages);

// The same for one kernel whose headers package is already resolved (a plan's kernel-headers
// step): installed when `check` (its build directory) does not exist, then checked again.
Result<std::vector<std::string>> ensure_headers(const util::HostFs& host, const std::string& kernel,
                                                const std::string& package, const std::string& check,
                                                pkg::PackageManager& packages);

} // namespace hpcbake::driver
