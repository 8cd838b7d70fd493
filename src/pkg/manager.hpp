#pragma once
// Package managers (apt, dnf) over an exec::Runner. Every mutating call first waits for the
// package database locks (see pkg/lock.hpp) instead of failing because unattended-upgrades
// or cloud-init got there first; a command that then fails is reported with the exact
// command line and the tail of its output (ErrorKind::build), a lock still held at the
// timeout as ErrorKind::lock_held naming the holder.
//
// Package specs are passed through as given: "name" or "name=version" for apt,
// "name" or "name-version" for dnf. An empty list is a no-op.
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::pkg {

enum class Family { apt, dnf, tdnf }; // from the distro manifest's package manager
// The family of a distro manifest's package manager.
Family family_of(manifest::PackageManager pm);

struct PkgOptions {
  std::chrono::seconds lock_timeout{600};  // total wait for the locks, per operation
  std::chrono::milliseconds poll{1000};    // how often a held lock is checked again
  std::chrono::seconds command_timeout{0}; // per command; 0: none
  // Optional progress: "waiting for the dpkg lock (held by apt-get, pid 123)...",
  // "running: apt-get install ...".
  std::function<void(const std::string&)> on_status;
  // Optional: the commands' output as it arrives.
  std::function<void(std::string_view)> on_output;
};

class PackageManager {
public:
  virtual ~PackageManager() = default;
  // apt-get update / dnf makecache.
  virtual Status refresh() = 0;
  virtual Status install(const std::vector<std::string>& packages) = 0;
  // apt-mark hold (an apt "name=version" is held by name) / dnf versionlock add, which
  // first installs python3-dnf-plugin-versionlock when `dnf versionlock` is missing.
  virtual Status hold(const std::vector<std::string>& packages) = 0;
  // The installed version ("550.54.15-1", "%{VERSION}-%{RELEASE}" for rpm), nullopt when the
  // package is not installed (only removed with its config files kept counts as not installed).
  virtual Result<std::optional<std::string>> installed_version(const std::string& package) = 0;
  // The version the package index offers for install (apt-cache policy's Candidate), nullopt
  // when the index has no such package. Read after refresh(): the lists apt verified against the
  // archive's signed Release. Only apt answers; the others refuse (ErrorKind::unsupported).
  virtual Result<std::optional<std::string>> candidate_version(const std::string& package);
};

// `runner` must outlive the returned object; `fs` is copied.
std::unique_ptr<PackageManager> make_package_manager(Family family, exec::Runner& runner, const util::HostFs& fs,
                                                     PkgOptions options = {});

} // namespace hpcbake::pkg
