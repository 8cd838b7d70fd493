#include "driver/headers.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

namespace hpcbake::driver {

std::string headers_package(const manifest::DistroManifest& distro, const std::string& kernel) {
  return util::replace_all(distro.kernel_headers_package, "{kernel}", kernel);
}

Result<std::vector<std::string>> ensure_headers(const util::HostFs& host, const std::string& kernel,
                                                const std::string& package, const std::string& check,
                                                pkg::PackageManager& packages) {
  const std::string dir = check.empty() ? fmt::format("/lib/modules/{}/build", kernel) : check;
  if (host.exists(dir)) return std::vector<std::string>{};
  if (package.empty())
    return fail(ErrorKind::manifest, fmt::format("no headers package is known for kernel {}", kernel),
                "name the distro's kernel_headers_package in its manifest");
  if (auto s = packages.install({package}); !s) {
    Error e = s.error();
    e.hint = fmt::format("the headers must match the target kernel exactly ({}); if the mirror no longer has them, "
                         "boot the newest kernel first",
                         kernel);
    return std::unexpected(e);
  }
  if (!host.exists(dir))
    return fail(ErrorKind::build, fmt::format("{} installed, but {} still does not exist", package, dir),
                "check that the package provides headers for exactly this kernel build");
  return std::vector<std::string>{package};
}

Result<std::vector<std::string>> ensure_headers(const util::HostFs& host, const manifest::DistroManifest& distro,
                                                const std::vector<std::string>& kernels,
                                                pkg::PackageManager& packages) {
  auto build_dir = [](const std::string& k) { return fmt::format("/lib/modules/{}/build", k); };
  std::vector<std::string> wanted;
  for (const auto& k : kernels)
    if (!host.exists(build_dir(k))) wanted.push_back(headers_package(distro, k));
  if (wanted.empty()) return wanted;
  if (distro.kernel_headers_package.empty())
    return fail(ErrorKind::manifest,
                fmt::format("{}: distro {} names no kernel_headers_package", distro.file, distro.id));
  if (auto s = packages.install(wanted); !s) {
    Error e = s.error();
    e.hint = fmt::format("the headers must match each target kernel exactly ({}); if the mirror no longer has them, "
                         "boot the newest kernel first or pick it with --kernel",
                         util::join(kernels, ", "));
    return std::unexpected(e);
  }
  for (const auto& k : kernels)
    if (!host.exists(build_dir(k)))
      return fail(ErrorKind::build,
                  fmt::format("{} installed, but {} still does not exist", headers_package(distro, k), build_dir(k)),
                  "check that the package provides headers for exactly this kernel build");
  return wanted;
}

} // namespace hpcbake::driver
