#pragma once
// The `install` verb: the plan executed as a journaled transaction (library: src/install/).
// This file holds what only a command line needs: confirmation, the machine lock, progress
// lines, Ctrl-C, Batch start-task mode, reboots and the resume unit.
#include "detect/host.hpp"
#include "fetch/downloader.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace hpcbake::cli {

struct InstallOptions {
  bool yes = false;
  bool dry_run = false;
  bool resume_unit = false;
  std::string reboot = "exit"; // exit | auto | never
  long lock_timeout_s = 600;
  int jobs = 4;
  int verify_level = 1;
  std::vector<std::string> ib_devices; // passed to verify (soft-RoCE: rxe0)
  long fabric_wait_s = 60;
  std::string sign_key, sign_cert, key_dir;
};

// What the global options resolve to (app.cpp owns them).
struct InstallInputs {
  std::string root = "/";
  std::filesystem::path manifests_dir;
  std::string size; // --size, when given (only that size's manifest is read)
  fetch::Options fetch;
  std::string bundle;
  std::vector<std::string> sha256_overrides;
  std::string sign = "auto";
  // Plans for the given (or detected) size and distro on this host; the facts come back too.
  std::function<Result<std::pair<plan::Plan, detect::HostFacts>>(const manifest::Manifests&)> resolve;
  // The flags that pin what to install, repeated by the resume unit so that the next boot
  // continues the same install: global ones (--root, --manifests) and install's own (--size,
  // --distro, --bundle, --cache, --sign, --sha256).
  std::vector<std::string> global_args, install_args;
};

void add_install_options(CLI::App& install, InstallOptions& o);

int run_install(const InstallOptions& o, const InstallInputs& in, std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
